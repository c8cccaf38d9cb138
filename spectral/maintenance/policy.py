"""What maintenance does next: pure decisions over the generations and the clock (no I/O).

Two rings (migration ``bounded_state``): ``core.event_handled`` has two slots (current and
previous dedup generation), ``core.outbox`` four. This module decides, from their generation
rows, the broker's retention and ``now``:

* **outbox** — which ended generations to check for unpublished rows, which to empty (every row
  published, and published at least ``retention`` ago), whether to start a new generation
  (the current one is older than ``period`` and a slot is free);
* **dedup** — the cutoff before which handled keys may be forgotten, and whether to rotate (the
  current generation started before the cutoff: the previous one, all of whose keys were handled
  before that start, is forgotten and its slot becomes the current one).

The cutoff (docs/explanation/bounded-state.md has the argument in full):

    cutoff = min(now - horizon, start of every outbox generation still "hot")

where ``horizon`` >= L, the longest any record of a consumer's topics stays readable after it was
appended (spectral/kafka/retention.py), and an outbox generation is hot while it is current,
holds an unpublished row, or was last found fully published less than L ago. A key handled
before the cutoff came from an outbox row of a generation that is not hot: every copy the relays
ever sent of it was appended more than L ago, so no copy can still be read; and every record read
before the key was handled is older still.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TypeVar

DEDUP_SLOTS = 2
OUTBOX_SLOTS = 4


@dataclass(frozen=True, slots=True)
class DedupGeneration:
    generation: int
    slot: int
    started_at: datetime
    ended_at: datetime | None = None
    forgotten_at: datetime | None = None
    copies_before: datetime | None = None
    rows_forgotten: int | None = None

    @property
    def live(self) -> bool:
        return self.forgotten_at is None


@dataclass(frozen=True, slots=True)
class OutboxGeneration:
    generation: int
    slot: int
    started_at: datetime
    ended_at: datetime | None = None
    fully_published_at: datetime | None = None
    truncated_at: datetime | None = None
    rows_pruned: int | None = None

    @property
    def live(self) -> bool:
        return self.truncated_at is None

    def hot(self, now: datetime, lifetime: timedelta) -> bool:
        """May a copy of one of its rows still be sent, or still be read? (see module doc)"""
        return (
            self.ended_at is None
            or self.fully_published_at is None
            or self.fully_published_at > now - lifetime
        )


class Hold(StrEnum):
    """Why the dedup record is not rotated now: a bounded label set for metrics."""

    NONE = "none"
    """Not held: rotated (or would be, in a dry run)."""
    TOO_RECENT = "too_recent"
    """The normal wait: the current generation started after the cutoff."""
    OUTBOX = "outbox"
    """The cutoff is held back by an outbox generation that is still hot (unpublished rows,
    or published less than the horizon ago)."""
    REDRIVE = "redrive"
    """The cutoff is held back by a dead letter redriven recently (its copy may still be read,
    and the key it carries may have been handled long before)."""
    RETENTION_UNBOUNDED = "retention_unbounded"
    """A consumer's topic keeps records for ever (retention.ms = -1 or compaction only)."""
    UNKNOWN_CONSUMER = "unknown_consumer"
    """The previous generation holds keys of a consumer no deployment declares: its topics
    (hence their retention) are unknown."""
    BROKER_UNAVAILABLE = "broker_unavailable"
    """The topics' retention could not be read."""
    LOCK_TIMEOUT = "lock_timeout"
    """A transaction held the dedup table longer than the lock timeout."""


G = TypeVar("G", DedupGeneration, OutboxGeneration)


def current_of(generations: Sequence[G]) -> G:
    """The one generation that has not ended."""
    current = [g for g in generations if g.ended_at is None]
    if len(current) != 1:
        raise ValueError(f"expected exactly one current generation, found {len(current)}")
    return current[0]


# -- dedup ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cutoff:
    at: datetime
    bound: Hold = Hold.TOO_RECENT
    """What set it: the horizon (TOO_RECENT), a hot outbox generation (OUTBOX) or a recent
    redrive (REDRIVE)."""


def dedup_cutoff(
    now: datetime,
    horizon: timedelta,
    lifetime: timedelta,
    outbox: Sequence[OutboxGeneration],
    redrives: Sequence[datetime] = (),
) -> Cutoff:
    """Keys handled before ``at`` may be forgotten (``horizon`` >= ``lifetime``). ``redrives``:
    the bounds recent redrives set (:func:`redrive_bound`)."""
    candidates = [(now - horizon, Hold.TOO_RECENT)]
    candidates += [(g.started_at, Hold.OUTBOX) for g in outbox if g.hot(now, lifetime)]
    candidates += [(at, Hold.REDRIVE) for at in redrives]
    at, bound = min(candidates, key=lambda c: c[0])  # ties keep the horizon (listed first)
    return Cutoff(at, bound)


def redrive_bound(redriven_at: datetime, dlq_lifetime: timedelta, lifetime: timedelta) -> datetime:
    """How far back a dead letter redriven at ``redriven_at`` holds the cutoff while its copy may
    still be read. The redriven copy carries the key of a record that failed: that record was
    read (and dead-lettered) before ``redriven_at`` by at most ``dlq_lifetime`` (the dead letter
    was still readable), and was appended before it was read by at most ``lifetime``. Had its
    key been handled, it was handled from a copy at least as old as one of that record's copies
    — not before ``redriven_at - dlq_lifetime - lifetime``: keys handled since stay."""
    return redriven_at - dlq_lifetime - lifetime


@dataclass(frozen=True, slots=True)
class DedupRotation:
    """End ``current``, forget ``forget`` (None: nothing to forget yet) and start generation
    ``new_generation`` in ``new_slot``."""

    current: DedupGeneration
    forget: DedupGeneration | None
    new_generation: int
    new_slot: int
    lifetime: timedelta


def plan_dedup(
    generations: Sequence[DedupGeneration], cutoff: Cutoff, lifetime: timedelta
) -> DedupRotation | Hold:
    """Rotate when every key of the previous generation was handled before the cutoff, i.e.
    when the current generation (which began when the previous one ended) started before it."""
    current = current_of(generations)
    if current.started_at > cutoff.at:
        return cutoff.bound
    previous = [g for g in generations if g.live and g.ended_at is not None]
    forget = max(previous, key=lambda g: g.generation) if previous else None
    slot = forget.slot if forget is not None else (current.slot + 1) % DEDUP_SLOTS
    return DedupRotation(current, forget, current.generation + 1, slot, lifetime)


def horizon_of(lifetime: timedelta, minimum: timedelta) -> timedelta:
    """The dedup horizon: what the broker's retention requires, or the promised minimum."""
    return max(lifetime, minimum)


def copies_before(generations: Sequence[DedupGeneration]) -> datetime | None:
    """Records appended at or after this time carry no forgotten key (None: nothing was ever
    forgotten). The replay guard refuses ranges that reach further back."""
    return max((g.copies_before for g in generations if g.copies_before is not None), default=None)


# -- outbox --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OutboxPlan:
    check: tuple[OutboxGeneration, ...]
    """Ended generations not yet found fully published: look for unpublished rows."""
    truncate: tuple[OutboxGeneration, ...]
    """Fully published for at least the retention: empty their slots."""
    rotate_to_slot: int | None
    """Start a new generation in this slot (None: keep the current one)."""


def plan_outbox(
    generations: Sequence[OutboxGeneration],
    now: datetime,
    retention: timedelta,
    period: timedelta,
) -> OutboxPlan:
    current = current_of(generations)
    ended = [g for g in generations if g.live and g.ended_at is not None]
    check = tuple(g for g in ended if g.fully_published_at is None)
    truncate = tuple(
        g
        for g in ended
        if g.fully_published_at is not None and g.fully_published_at <= now - retention
    )
    rotate_to: int | None = None
    if current.started_at <= now - period:
        busy = {g.slot for g in generations if g.live} - {g.slot for g in truncate}
        free = [slot for slot in range(OUTBOX_SLOTS) if slot not in busy]
        rotate_to = min(free, default=None)
    return OutboxPlan(check, truncate, rotate_to)


def outbox_period(retention: timedelta) -> timedelta:
    """How long one outbox generation takes new rows: half the retention, so a generation is
    emptied about 1.5 retentions after it started and four slots always leave one free."""
    return retention / 2
