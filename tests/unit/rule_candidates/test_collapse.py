from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from consumers.rule_candidates.collapse import Collapsed, OrderKey, collapse, order_key
from contracts.fields import epoch_micros

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def us(moment: datetime) -> int:
    return epoch_micros(moment)


@dataclass(frozen=True)
class Snap:
    name: str
    cluster: str
    key: OrderKey


def snap(name: str, cluster: str, seconds: int, count: int = 1, digest: str = "a" * 32) -> Snap:
    return Snap(name, cluster, order_key(us(T0 + timedelta(seconds=seconds)), count, digest))


def run(*snaps: Snap) -> Collapsed[str, Snap]:
    return collapse((s.cluster, s.key, s) for s in snaps)


def names(items: list[Snap]) -> list[str]:
    return [s.name for s in items]


def test_one_snapshot_per_cluster_wins() -> None:
    out = run(snap("a1", "A", 1), snap("b1", "B", 5))
    assert {k: v.name for k, v in out.winners.items()} == {"A": "a1", "B": "b1"}
    assert out.stale == []
    assert out.superseded == {}


def test_the_newest_wins_and_earlier_ones_were_applied_then_overwritten() -> None:
    out = run(snap("a1", "A", 1), snap("a2", "A", 2), snap("a3", "A", 3))
    assert out.winners["A"].name == "a3"
    assert names(out.superseded["A"]) == ["a1", "a2"]
    assert out.stale == []


def test_a_snapshot_arriving_after_a_newer_one_is_stale() -> None:
    out = run(snap("a3", "A", 3), snap("a1", "A", 1), snap("a2", "A", 2))
    assert out.winners["A"].name == "a3"
    assert names(out.stale) == ["a1", "a2"]
    assert out.superseded == {}


def test_mixed_arrival_order() -> None:
    out = run(snap("a2", "A", 2), snap("a1", "A", 1), snap("a3", "A", 3))
    assert out.winners["A"].name == "a3"
    assert names(out.superseded["A"]) == ["a2"]
    assert names(out.stale) == ["a1"]


def test_ties_on_last_observed_at_are_broken_by_failure_count_then_hash() -> None:
    out = run(snap("more", "A", 1, count=9), snap("fewer", "A", 1, count=2))
    assert out.winners["A"].name == "more"
    assert names(out.stale) == ["fewer"]
    out = run(snap("low", "A", 1, digest="0" * 32), snap("high", "A", 1, digest="f" * 32))
    assert out.winners["A"].name == "high"
    assert names(out.superseded["A"]) == ["low"]


def test_an_equal_snapshot_after_the_first_is_stale() -> None:
    out = run(snap("first", "A", 1), snap("again", "A", 1))
    assert out.winners["A"].name == "first"
    assert names(out.stale) == ["again"]


def test_winners_keep_first_appearance_order() -> None:
    out = run(snap("b", "B", 1), snap("a", "A", 1), snap("b2", "B", 2))
    assert list(out.winners) == ["B", "A"]


@st.composite
def batches(draw: st.DrawFn) -> list[Snap]:
    size = draw(st.integers(min_value=0, max_value=30))
    return [
        snap(
            f"s{i}",
            draw(st.sampled_from("ABC")),
            draw(st.integers(0, 5)),
            draw(st.integers(1, 3)),
            draw(st.sampled_from(["0" * 32, "7" * 32, "f" * 32])),
        )
        for i in range(size)
    ]


@given(batches())
def test_collapse_equals_applying_one_by_one(batch: list[Snap]) -> None:
    """The batch leaves what sequential application would, and classifies each snapshot alike."""
    stored: dict[str, OrderKey] = {}
    applied: set[str] = set()
    for s in batch:
        if s.cluster not in stored or s.key > stored[s.cluster]:
            stored[s.cluster] = s.key
            applied.add(s.name)
    out = run(*batch)
    assert {c: w.key for c, w in out.winners.items()} == stored
    assert out.newest == stored  # each winner's key, as the handler reads it for the upsert
    collapsed_applied = {w.name for w in out.winners.values()} | {
        s.name for group in out.superseded.values() for s in group
    }
    assert collapsed_applied == applied
    assert set(names(out.stale)) == {s.name for s in batch} - applied


def test_ordered_at_caps_an_observation_from_a_clock_ahead_at_the_record_time_plus_skew() -> None:
    from consumers.rule_candidates.collapse import MAX_CLOCK_SKEW, ordered_at  # noqa: PLC0415

    published = T0 + timedelta(hours=1)
    stamp = int(published.timestamp() * 1000)
    now = us(T0)
    assert ordered_at(us(T0), stamp, now) == us(T0)  # observed before it was published: as written
    within = us(published + MAX_CLOCK_SKEW)
    assert ordered_at(within, stamp, now) == within
    assert ordered_at(us(published + timedelta(days=1)), stamp, now) == within
    # no record timestamp (negative or zero): capped by the consumer's clock instead
    assert ordered_at(us(T0 + timedelta(days=1)), -1, now) == us(T0 + MAX_CLOCK_SKEW)
    assert ordered_at(us(T0 + timedelta(days=1)), 0, now) == us(T0 + MAX_CLOCK_SKEW)


@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(1, 10**12))
def test_capping_keeps_the_order_of_snapshots_published_together(a: int, b: int, ms: int) -> None:
    from consumers.rule_candidates.collapse import ordered_at  # noqa: PLC0415

    first, second = sorted([us(T0 + timedelta(seconds=a)), us(T0 + timedelta(seconds=b))])
    assert ordered_at(first, ms, us(T0)) <= ordered_at(second, ms, us(T0))
