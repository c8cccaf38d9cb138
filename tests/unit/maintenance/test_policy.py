"""Maintenance's decisions (spectral/maintenance/policy.py) and the broker's bound on how long a
record stays readable (spectral/kafka/retention.py): pure, no services."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spectral.kafka.retention import TopicRetention
from spectral.maintenance.policy import (
    Cutoff,
    DedupGeneration,
    DedupRotation,
    Hold,
    OutboxGeneration,
    copies_before,
    current_of,
    dedup_cutoff,
    horizon_of,
    outbox_period,
    plan_dedup,
    plan_outbox,
    redrive_bound,
)

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
NEVER = datetime.min.replace(tzinfo=UTC)
DAY = timedelta(days=1)
HOUR = timedelta(hours=1)


# -- the broker's bound -----------------------------------------------------------------------


def test_a_record_stays_readable_for_retention_segment_skew_and_the_check_interval() -> None:
    topic = TopicRetention(
        "t",
        exists=True,
        retention_ms=7 * 86_400_000,
        segment_ms=86_400_000,
        segment_jitter_ms=60_000,
        timestamp_after_max_ms=3_600_000,
    )
    assert topic.readable_for(300_000) == timedelta(days=8, hours=1, minutes=6)


@pytest.mark.parametrize(
    ("retention_ms", "policy"), [(-1, "delete"), (60_000, "compact"), (-1, "compact,delete")]
)
def test_infinite_retention_and_compaction_alone_keep_records_for_ever(
    retention_ms: int, policy: str
) -> None:
    topic = TopicRetention("t", exists=True, retention_ms=retention_ms, cleanup_policy=policy)
    assert topic.unbounded
    assert topic.readable_for(300_000) is None


def test_compaction_with_deletion_is_bounded_by_retention() -> None:
    topic = TopicRetention("t", exists=True, retention_ms=1000, cleanup_policy="compact, delete")
    assert not topic.unbounded
    assert topic.readable_for(0) == timedelta(seconds=1)


def test_a_topic_that_does_not_exist_holds_no_record() -> None:
    topic = TopicRetention("t", exists=False)
    assert not topic.unbounded
    assert topic.readable_for(300_000) == timedelta(0)


# -- the dedup cutoff -------------------------------------------------------------------------


def outbox_gen(
    n: int,
    started: datetime,
    ended: datetime | None = None,
    published: datetime | None = None,
    truncated: datetime | None = None,
) -> OutboxGeneration:
    return OutboxGeneration(n, n % 4, started, ended, published, truncated)


def test_the_cutoff_is_the_horizon_when_no_outbox_generation_is_hot() -> None:
    outbox = [
        outbox_gen(1, NEVER, NOW - 30 * DAY, NOW - 30 * DAY, NOW - 29 * DAY),
        outbox_gen(2, NOW - 30 * DAY, NOW - HOUR, NOW - HOUR),
        outbox_gen(3, NOW - HOUR),
    ]
    cutoff = dedup_cutoff(NOW, 14 * DAY, 14 * DAY, outbox)
    # generation 2 was published an hour ago: still hot, so the cutoff is its start
    assert cutoff == Cutoff(NOW - 30 * DAY, Hold.OUTBOX)
    cutoff = dedup_cutoff(NOW, 14 * DAY, 14 * DAY, outbox[:1] + outbox[2:])
    assert cutoff == Cutoff(NOW - 14 * DAY)


def test_an_outbox_generation_with_unpublished_rows_holds_the_cutoff_at_its_start() -> None:
    outbox = [outbox_gen(1, NOW - 40 * DAY, NOW - 39 * DAY), outbox_gen(2, NOW - 39 * DAY)]
    cutoff = dedup_cutoff(NOW, 14 * DAY, 14 * DAY, outbox)
    assert cutoff == Cutoff(NOW - 40 * DAY, Hold.OUTBOX)


def test_an_outbox_generation_published_less_than_the_lifetime_ago_is_hot() -> None:
    late = outbox_gen(1, NOW - 40 * DAY, NOW - 39 * DAY, NOW - 13 * DAY)
    assert late.hot(NOW, 14 * DAY)
    assert not late.hot(NOW, 12 * DAY)


def dedup_gen(
    n: int, slot: int, started: datetime, ended: datetime | None = None
) -> DedupGeneration:
    return DedupGeneration(n, slot, started, ended)


def test_the_first_rotation_forgets_nothing() -> None:
    decision = plan_dedup([dedup_gen(1, 0, NEVER)], Cutoff(NEVER), DAY)
    assert isinstance(decision, DedupRotation)
    assert decision.forget is None
    assert (decision.new_generation, decision.new_slot) == (2, 1)


def test_the_previous_generation_is_forgotten_once_the_current_one_started_before_the_cutoff() -> (
    None
):
    generations = [dedup_gen(1, 0, NEVER, NOW - 20 * DAY), dedup_gen(2, 1, NOW - 20 * DAY)]
    held = plan_dedup(generations, Cutoff(NOW - 21 * DAY), DAY)
    assert held is Hold.TOO_RECENT
    held = plan_dedup(generations, Cutoff(NOW - 21 * DAY, Hold.OUTBOX), DAY)
    assert held is Hold.OUTBOX
    decision = plan_dedup(generations, Cutoff(NOW - 14 * DAY), DAY)
    assert isinstance(decision, DedupRotation)
    assert decision.forget == generations[0]
    assert (decision.new_generation, decision.new_slot) == (3, 0)


def test_a_recent_redrive_holds_the_cutoff_back_by_both_lifetimes() -> None:
    bound = redrive_bound(NOW - DAY, 30 * DAY, 8 * DAY)
    assert bound == NOW - 39 * DAY
    cutoff = dedup_cutoff(NOW, 8 * DAY, 8 * DAY, [outbox_gen(1, NOW - HOUR)], [bound])
    assert cutoff == Cutoff(NOW - 39 * DAY, Hold.REDRIVE)
    generations = [dedup_gen(1, 0, NEVER, NOW - 20 * DAY), dedup_gen(2, 1, NOW - 20 * DAY)]
    assert plan_dedup(generations, cutoff, DAY) is Hold.REDRIVE


def test_the_horizon_is_the_lifetime_or_the_promised_minimum() -> None:
    assert horizon_of(DAY, timedelta(0)) == DAY
    assert horizon_of(DAY, 30 * DAY) == 30 * DAY


def test_copies_before_is_the_latest_of_the_forgotten_generations() -> None:
    assert copies_before([dedup_gen(1, 0, NEVER)]) is None
    forgotten = [
        DedupGeneration(1, 0, NEVER, NOW - 9 * DAY, NOW - 3 * DAY, NOW - 4 * DAY),
        DedupGeneration(2, 1, NOW - 9 * DAY, NOW - 2 * DAY, NOW - DAY, NOW - 2 * DAY),
        dedup_gen(3, 0, NOW - 2 * DAY),
    ]
    assert copies_before(forgotten) == NOW - 2 * DAY


def test_exactly_one_current_generation_is_required() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        current_of([dedup_gen(1, 0, NEVER, NOW)])


@st.composite
def timelines(draw: st.DrawFn) -> tuple[list[DedupGeneration], list[OutboxGeneration], datetime]:
    """A dedup history (generation starts) and an outbox history, then a moment to decide at."""
    starts = sorted(draw(st.lists(st.integers(0, 60 * 24), min_size=1, max_size=6, unique=True)))
    dedup = [
        DedupGeneration(
            i + 1,
            i % 2,
            NOW + timedelta(minutes=s),
            NOW + timedelta(minutes=starts[i + 1]) if i + 1 < len(starts) else None,
        )
        for i, s in enumerate(starts)
    ]
    live = dedup[-2:]
    dedup = [
        g
        if g in live
        else DedupGeneration(g.generation, g.slot, g.started_at, g.ended_at, g.ended_at, g.ended_at)
        for g in dedup
    ]
    o_starts = sorted(draw(st.lists(st.integers(0, 60 * 24), min_size=1, max_size=6, unique=True)))
    outbox = []
    for i, s in enumerate(o_starts):
        ended = NOW + timedelta(minutes=o_starts[i + 1]) if i + 1 < len(o_starts) else None
        published = None
        if ended is not None and draw(st.booleans()):
            published = ended + timedelta(minutes=draw(st.integers(0, 60 * 24)))
        outbox.append(OutboxGeneration(i + 1, i % 4, NOW + timedelta(minutes=s), ended, published))
    at = NOW + timedelta(minutes=draw(st.integers(max(starts[-1], o_starts[-1]), 4 * 60 * 24)))
    return dedup, outbox, at


@given(timelines(), st.integers(1, 48 * 60))
def test_a_forgotten_generation_ended_before_every_hot_outbox_generation_began(
    timeline: tuple[list[DedupGeneration], list[OutboxGeneration], datetime], minutes: int
) -> None:
    """The heart of the argument: every key of the generation forgotten was handled before the
    cutoff, i.e. before the start of every outbox generation that may still send or expose a
    copy of a row, and more than the horizon ago."""
    dedup, outbox, now = timeline
    lifetime = timedelta(minutes=minutes)
    cutoff = dedup_cutoff(now, lifetime, lifetime, outbox)
    decision = plan_dedup(dedup, cutoff, lifetime)
    if not isinstance(decision, DedupRotation) or decision.forget is None:
        return
    ended = decision.forget.ended_at
    assert ended is not None
    assert ended <= now - lifetime
    for generation in outbox:
        if generation.hot(now, lifetime):
            assert ended <= generation.started_at


# -- the outbox -------------------------------------------------------------------------------


def test_an_ended_generation_is_checked_then_emptied_after_the_retention() -> None:
    generations = [
        outbox_gen(1, NEVER, NOW - 2 * DAY),
        outbox_gen(2, NOW - 2 * DAY, NOW - DAY, NOW - DAY + HOUR),
        outbox_gen(3, NOW - DAY),
    ]
    plan = plan_outbox(generations, NOW, DAY, outbox_period(DAY))
    assert plan.check == (generations[0],)
    assert plan.truncate == ()
    assert plan.rotate_to_slot == 0  # generation 3 is older than half a day; slot 0 is free
    later = plan_outbox(generations, NOW + 2 * HOUR, DAY, outbox_period(DAY))
    assert later.truncate == (generations[1],)


def test_no_rotation_without_a_free_slot() -> None:
    generations = [
        OutboxGeneration(1, 0, NOW - 4 * DAY, NOW - 3 * DAY),
        OutboxGeneration(2, 1, NOW - 3 * DAY, NOW - 2 * DAY),
        OutboxGeneration(3, 2, NOW - 2 * DAY, NOW - DAY),
        OutboxGeneration(4, 3, NOW - DAY),
    ]
    plan = plan_outbox(generations, NOW, DAY, outbox_period(DAY))
    assert plan.rotate_to_slot is None
    assert {g.generation for g in plan.check} == {1, 2, 3}


def test_a_generation_being_emptied_frees_its_slot_for_the_rotation() -> None:
    generations = [
        OutboxGeneration(1, 0, NOW - 4 * DAY, NOW - 3 * DAY, NOW - 3 * DAY),
        OutboxGeneration(2, 1, NOW - 3 * DAY, NOW - 2 * DAY),
        OutboxGeneration(3, 2, NOW - 2 * DAY, NOW - DAY),
        OutboxGeneration(4, 3, NOW - DAY),
    ]
    plan = plan_outbox(generations, NOW, DAY, outbox_period(DAY))
    assert plan.truncate == (generations[0],)
    assert plan.rotate_to_slot == 0


def test_four_slots_are_enough_when_generations_last_half_the_retention() -> None:
    """Simulate a steady outbox: rotations every half retention, each generation published an
    hour after it ends, maintenance every hour: a free slot is always there in time."""
    retention = DAY
    generations = [OutboxGeneration(1, 0, NOW)]
    t = NOW
    for _ in range(24 * 10):
        t += HOUR
        updated = []
        for g in generations:
            published = g.fully_published_at
            if g.ended_at is not None and published is None and t >= g.ended_at + HOUR:
                published = t
            updated.append(
                OutboxGeneration(
                    g.generation, g.slot, g.started_at, g.ended_at, published, g.truncated_at
                )
            )
        generations = updated
        plan = plan_outbox(generations, t, retention, outbox_period(retention))
        emptied = {g.generation for g in plan.truncate}
        generations = [
            OutboxGeneration(
                g.generation, g.slot, g.started_at, g.ended_at, g.fully_published_at, t
            )
            if g.generation in emptied
            else g
            for g in generations
        ]
        if plan.rotate_to_slot is not None:
            current = current_of(generations)
            generations = [
                OutboxGeneration(g.generation, g.slot, g.started_at, t) if g is current else g
                for g in generations
            ] + [OutboxGeneration(current.generation + 1, plan.rotate_to_slot, t)]
        assert t - current_of(generations).started_at <= outbox_period(retention) + HOUR
