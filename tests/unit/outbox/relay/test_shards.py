"""The relay's shard policy: fair shares, surplus given back, the SQL's shard formula."""

from __future__ import annotations

from spectral.outbox.relay.shards import SHARD_COUNT, fair_share, plan, shard_of


def test_fair_share() -> None:
    assert fair_share(0) == SHARD_COUNT
    assert fair_share(1) == SHARD_COUNT
    assert fair_share(2) == SHARD_COUNT // 2
    assert fair_share(3) == 6
    assert fair_share(100) == 1


def test_a_lone_relay_asks_for_every_shard_from_its_offset() -> None:
    step = plan(frozenset(), members=1, offset=5)
    assert step.release == ()
    assert step.want == SHARD_COUNT
    assert step.candidates[:3] == (5, 6, 7)
    assert sorted(step.candidates) == list(range(SHARD_COUNT))


def test_a_relay_with_a_surplus_gives_back_its_highest_shards() -> None:
    step = plan(frozenset(range(SHARD_COUNT)), members=2, offset=0)
    assert step.release == tuple(range(8, 16))
    assert step.want == 0


def test_a_relay_short_of_its_share_asks_only_for_shards_it_lacks() -> None:
    step = plan(frozenset({0, 1}), members=2, offset=0)
    assert step.want == 6
    assert 0 not in step.candidates
    assert 1 not in step.candidates


def test_two_relays_converge_to_disjoint_halves() -> None:
    owner: dict[int, str] = {}
    held = {"a": set(range(SHARD_COUNT)), "b": set()}
    for shard in held["a"]:
        owner[shard] = "a"
    for _ in range(3):
        for name in ("a", "b"):
            step = plan(frozenset(held[name]), members=2, offset=3 if name == "b" else 0)
            for shard in step.release:
                held[name].discard(shard)
                del owner[shard]
            won = 0
            for shard in step.candidates:
                if won == step.want:
                    break
                if shard not in owner:
                    owner[shard] = name
                    held[name].add(shard)
                    won += 1
    assert len(held["a"]) == len(held["b"]) == SHARD_COUNT // 2
    assert not held["a"] & held["b"]


def test_shard_of_is_stable() -> None:
    assert shard_of("00000000-0000-0000-0000-000000000001") == shard_of(
        "00000000-0000-0000-0000-000000000001"
    )
    assert {shard_of(f"key-{i}") for i in range(500)} == set(range(SHARD_COUNT))
