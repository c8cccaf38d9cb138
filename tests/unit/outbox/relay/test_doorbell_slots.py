"""Which doorbell slot a relay sleeps on."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from spectral.outbox.relay.shards import (
    DOORBELL_BASE,
    MEMBER_LOCK,
    SHARD_COUNT,
    doorbell_slot,
    plan,
)


def test_a_relay_without_shards_has_no_slot_and_the_slots_sit_above_the_other_locks() -> None:
    assert doorbell_slot(set()) is None
    assert DOORBELL_BASE > MEMBER_LOCK > SHARD_COUNT


@given(st.lists(st.frozensets(st.integers(0, SHARD_COUNT - 1)), min_size=2, max_size=6))
def test_relays_holding_disjoint_shards_never_share_a_slot(holdings: list[frozenset[int]]) -> None:
    taken: set[int] = set()
    disjoint = []
    for held in holdings:  # shards are exclusive: give each relay what nobody holds yet
        mine = held - taken
        taken |= mine
        disjoint.append(mine)
    slots = [doorbell_slot(held) for held in disjoint if held]
    assert len(slots) == len(set(slots))
    assert all(0 <= s < SHARD_COUNT for s in slots if s is not None)


def test_a_relay_giving_shards_back_keeps_its_lowest() -> None:
    step = plan(frozenset(range(SHARD_COUNT)), members=2, offset=5)
    assert 0 not in step.release  # so the slot it sleeps on does not move while others join
