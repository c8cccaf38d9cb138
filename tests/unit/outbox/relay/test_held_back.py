"""Keys whose first row Kafka refused for good: left out until their next try, tried with their
first row alone, released once it is published."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from spectral.outbox.relay.relay import FORGET_AFTER, HeldBack
from spectral.outbox.relay.repository import OutboxRow
from spectral.retry import Backoff


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def row(row_id: int, key: str) -> OutboxRow:
    return OutboxRow(row_id, "t", key, f"{key}:{row_id}", b"{}")


def test_a_refused_key_waits_for_its_try_with_a_growing_capped_delay() -> None:
    clock = Clock()
    held = HeldBack(Backoff(base=1.0, cap=4.0), clock)
    assert [held.refused("a") for _ in range(4)] == [1.0, 2.0, 4.0, 4.0]
    assert held.waiting() == ["a"]
    clock.now += 4.5
    assert held.waiting() == []  # due: the next batch tries it
    assert held.published("a")
    assert not held.published("a")
    assert held.refused("a") == 1.0  # a new refusal starts the backoff again


def test_a_key_no_relay_refused_again_is_forgotten() -> None:
    clock = Clock()
    held = HeldBack(Backoff(base=1.0, cap=4.0), clock)
    held.refused("a")
    clock.now += 1.0 + FORGET_AFTER + 1
    assert held.waiting() == []
    assert held.keys == {}


@given(
    st.lists(st.tuples(st.integers(1, 10_000), st.sampled_from("abcde")), unique_by=lambda t: t[0])
)
def test_a_try_sends_a_refused_keys_first_row_alone(pairs: list[tuple[int, str]]) -> None:
    rows = [row(i, k) for i, k in sorted(pairs)]
    held = HeldBack(Backoff(), Clock())
    held.refused("a")
    held.refused("b")
    hold = held.on_trial(rows)
    for key in "abcde":
        ids = [r.id for r in rows if r.record_key == key]
        sent = [i for i in ids if i not in hold]
        assert sent == (ids[:1] if key in "ab" else ids)
