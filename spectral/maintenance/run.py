"""One maintenance pass: prune published outbox rows, rotate the dedup record, report sizes.

Order of a pass (each step its own short transaction, so a stuck step costs only itself):

1. **outbox** — every ended generation not yet found fully published is checked: no unpublished
   row → it is recorded fully published (as of now); only delayed rows left → they are moved to
   the current slot first. Generations fully published for at least the retention are emptied
   (TRUNCATE, after re-checking under an exclusive lock). If the current generation is older
   than half the retention and a slot is free, a new generation starts.
2. **dedup** — the consumers holding keys in the previous generation are listed; their topics'
   retention is read from the broker; the cutoff is computed (policy.py); if the current
   generation started before it, the previous one is forgotten (TRUNCATE of its slot) and a new
   generation starts. A consumer no deployment declares, a topic that keeps records for ever,
   or a broker that cannot be asked holds the rotation back, with its reason in the report and
   in ``spectral_dedup_rotation_held``.
3. **sizes** — rows and bytes of both tables, as gauges.

``dry_run`` decides and reports everything and changes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from spectral.errors import SpectralError
from spectral.kafka.retention import BrokerRetention
from spectral.maintenance.metrics import TABLES, MaintenanceMetrics, RunOutcome
from spectral.maintenance.policy import (
    DedupRotation,
    Hold,
    OutboxGeneration,
    current_of,
    dedup_cutoff,
    horizon_of,
    outbox_period,
    plan_dedup,
    plan_outbox,
    redrive_bound,
)
from spectral.maintenance.repository import (
    LockTimeoutError,
    MaintenanceRepository,
    PartitionSize,
)
from spectral.observability.logging import get_logger

log = get_logger(__name__)
T = TypeVar("T")

DescribeRetention = Callable[[Sequence[str]], Awaitable[BrokerRetention]]
"""Reads the retention settings of the given topics (spectral/kafka/retention.py)."""


@dataclass(frozen=True)
class MaintenanceOptions:
    outbox_retention: timedelta = timedelta(days=1)
    """Published outbox rows are kept at least this long after they were published."""
    min_dedup_horizon: timedelta = timedelta(0)
    """Dedup keys are kept at least this long, whatever the topics' retention (a replay window
    promised beyond what the broker keeps, e.g. for records mirrored elsewhere)."""
    grace: timedelta = timedelta(minutes=10)
    """Added to the broker's bound: clock differences between the database and the brokers,
    records still in a consumer's fetch buffers, producer retries."""
    lock_timeout: timedelta = timedelta(seconds=2)
    delay_margin: timedelta = timedelta(minutes=1)
    """Unpublished rows a relay may publish within this margin are left where they are (a relay
    may be publishing them); rows delayed beyond it, and rows queued behind one of their key
    that is, may be moved to the current generation."""
    dry_run: bool = False


@dataclass
class OutboxReport:
    checked: list[int] = field(default_factory=list)
    fully_published: list[int] = field(default_factory=list)
    waiting_for_relay: list[int] = field(default_factory=list)
    moved_delayed_rows: int = 0
    pruned: dict[int, int] = field(default_factory=dict)
    """Generation -> rows pruned (statistics' estimate)."""
    started: int | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "checked_generations": self.checked,
            "fully_published_generations": self.fully_published,
            "waiting_for_relay": self.waiting_for_relay,
            "moved_delayed_rows": self.moved_delayed_rows,
            "pruned": {str(g): n for g, n in self.pruned.items()},
            "started_generation": self.started,
            "error": self.error,
        }


def _moment(value: datetime | None) -> str | None:
    """A timestamp for a report; None for none, and for the beginning of time (an outbox
    generation that started at -infinity holds the cutoff there: nothing may be forgotten yet,
    which the hold says, not a date of year 1)."""
    if value is None or value.year == 1:  # datetime.min, which -infinity reads as
        return None
    return value.isoformat()


@dataclass
class DedupReport:
    hold: Hold = Hold.TOO_RECENT
    lifetime_seconds: float | None = None
    horizon_seconds: float | None = None
    cutoff: datetime | None = None
    consumers: list[str] = field(default_factory=list)
    """Consumers holding keys in the generation that would be forgotten."""
    unknown_consumers: list[str] = field(default_factory=list)
    unbounded_topics: list[str] = field(default_factory=list)
    forgotten_generation: int | None = None
    forgotten_rows: int = 0
    started: int | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "hold": self.hold.value,
            "lifetime_seconds": self.lifetime_seconds,
            "horizon_seconds": self.horizon_seconds,
            "cutoff": _moment(self.cutoff),
            "consumers": self.consumers,
            "unknown_consumers": self.unknown_consumers,
            "unbounded_topics": self.unbounded_topics,
            "forgotten_generation": self.forgotten_generation,
            "forgotten_rows": self.forgotten_rows,
            "started_generation": self.started,
            "error": self.error,
        }


@dataclass
class MaintenanceReport:
    dry_run: bool
    busy: bool = False
    seconds: float = 0.0
    outbox: OutboxReport = field(default_factory=OutboxReport)
    dedup: DedupReport = field(default_factory=DedupReport)
    sizes: list[PartitionSize] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.outbox.error is None and self.dedup.error is None

    def totals(self) -> dict[str, tuple[int, int]]:
        """Table -> (rows, bytes) summed over its partitions."""
        out = dict.fromkeys(TABLES, (0, 0))
        for size in self.sizes:
            rows, size_bytes = out.get(size.table, (0, 0))
            out[size.table] = (rows + size.rows, size_bytes + size.bytes)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "busy": self.busy,
            "ok": self.ok,
            "seconds": round(self.seconds, 3),
            "outbox": self.outbox.to_json(),
            "dedup": self.dedup.to_json(),
            "tables": {t: {"rows": r, "bytes": b} for t, (r, b) in self.totals().items()},
            "partitions": [
                {"partition": s.partition, "rows": s.rows, "bytes": s.bytes} for s in self.sizes
            ],
        }


async def maintain(
    repo: MaintenanceRepository,
    consumers: Mapping[str, Sequence[str]],
    describe: DescribeRetention,
    options: MaintenanceOptions,
    metrics: MaintenanceMetrics | None = None,
) -> MaintenanceReport:
    """One pass. ``consumers``: every deployment's consumer name -> its topics."""
    started = time.monotonic()
    report = MaintenanceReport(dry_run=options.dry_run)
    if not await repo.try_lock():
        report.busy = True
        log.info("maintenance skipped: another run holds the lock")
        if metrics is not None:
            metrics.runs[RunOutcome.BUSY].inc()
        return report
    try:
        await _outbox(repo, options, report.outbox, metrics)
        await _dedup(repo, consumers, describe, options, report=report.dedup, metrics=metrics)
        report.sizes = await repo.table_sizes()
    finally:
        await repo.unlock()
    report.seconds = time.monotonic() - started
    if metrics is not None:
        _record(metrics, report)
    log.info(
        "maintenance",
        dry_run=options.dry_run,
        seconds=round(report.seconds, 3),
        dedup_hold=report.dedup.hold.value,
        dedup_forgotten_generation=report.dedup.forgotten_generation,
        dedup_forgotten_rows=report.dedup.forgotten_rows,
        outbox_pruned=sum(report.outbox.pruned.values()),
        outbox_waiting_for_relay=report.outbox.waiting_for_relay,
        errors=[e for e in (report.outbox.error, report.dedup.error) if e],
    )
    return report


def _record(metrics: MaintenanceMetrics, report: MaintenanceReport) -> None:
    metrics.duration.observe(report.seconds)
    metrics.runs[RunOutcome.OK if report.ok else RunOutcome.FAILED].inc()
    if report.ok:
        metrics.last_success.set(time.time())
    metrics.hold(report.dedup.hold)
    if report.dedup.horizon_seconds is not None:
        metrics.horizon.set(report.dedup.horizon_seconds)
    if not report.dry_run:
        metrics.forgotten.inc(report.dedup.forgotten_rows)
        if report.dedup.started is not None:
            metrics.rotations.inc()
        metrics.pruned.inc(sum(report.outbox.pruned.values()))
        metrics.evacuated.inc(report.outbox.moved_delayed_rows)
    metrics.outbox_blocked.set(len(report.outbox.waiting_for_relay))
    for table, (rows, size) in report.totals().items():
        if table in metrics.rows:
            metrics.rows[table].set(rows)
            metrics.bytes[table].set(size)


# -- the outbox ---------------------------------------------------------------------------------


async def _outbox(
    repo: MaintenanceRepository,
    options: MaintenanceOptions,
    report: OutboxReport,
    metrics: MaintenanceMetrics | None,
) -> None:
    try:
        now = await repo.clock()
        period = outbox_period(options.outbox_retention)
        plan = plan_outbox(await repo.outbox_generations(), now, options.outbox_retention, period)
        for generation in plan.check:
            await _check(repo, options, report, generation)
        for generation in plan.truncate:
            rows = (
                await repo.estimated_rows(f"core.outbox_{generation.slot}")
                if options.dry_run
                else await _postponable(repo.truncate_outbox(generation, options.lock_timeout))
            )
            if rows is not None and rows >= 0:
                report.pruned[generation.generation] = rows
        generations = await repo.outbox_generations()
        if options.dry_run:  # what the truncations would free
            emptied = set(report.pruned)
            generations = [
                _truncated(g, now) if g.generation in emptied else g for g in generations
            ]
        rotate_to = plan_outbox(generations, now, options.outbox_retention, period).rotate_to_slot
        if rotate_to is not None:
            current = current_of(generations)
            if options.dry_run or await _postponable(
                _rotated(repo, current, rotate_to, options.lock_timeout)
            ):
                report.started = current.generation + 1
    except SpectralError as exc:
        report.error = str(exc)
        log.warning("outbox maintenance failed", error=str(exc))
    if metrics is not None:
        metrics.outbox_blocked.set(len(report.waiting_for_relay))


async def _postponable(step: Awaitable[T]) -> T | None:
    """``step``'s result; None when a table stayed locked longer than the lock timeout: the step
    is left to the next pass."""
    try:
        return await step
    except LockTimeoutError as exc:
        log.warning("outbox maintenance step postponed", error=str(exc))
        return None


async def _rotated(
    repo: MaintenanceRepository, current: OutboxGeneration, slot: int, lock_timeout: timedelta
) -> bool:
    await repo.rotate_outbox(current, slot, lock_timeout)
    return True


def _truncated(generation: OutboxGeneration, now: datetime) -> OutboxGeneration:
    return OutboxGeneration(
        generation.generation,
        generation.slot,
        generation.started_at,
        generation.ended_at,
        generation.fully_published_at,
        now,
        generation.rows_pruned,
    )


async def _check(
    repo: MaintenanceRepository,
    options: MaintenanceOptions,
    report: OutboxReport,
    generation: OutboxGeneration,
) -> None:
    report.checked.append(generation.generation)
    left = await repo.unpublished(generation.slot, options.delay_margin)
    if left.rows and not left.due:
        report.moved_delayed_rows += (
            left.rows
            if options.dry_run
            else await repo.evacuate_delayed(generation.slot, options.delay_margin)
        )
        left = left if options.dry_run else await repo.unpublished(generation.slot, timedelta(0))
        if options.dry_run:
            report.fully_published.append(generation.generation)
            return
    if left.rows:
        report.waiting_for_relay.append(generation.generation)
        return
    if not options.dry_run:
        await repo.mark_fully_published(generation.generation)
    report.fully_published.append(generation.generation)


# -- the dedup record ---------------------------------------------------------------------------


async def _dedup(
    repo: MaintenanceRepository,
    consumers: Mapping[str, Sequence[str]],
    describe: DescribeRetention,
    options: MaintenanceOptions,
    *,
    report: DedupReport,
    metrics: MaintenanceMetrics | None,
) -> None:
    try:
        rotation = await _plan_dedup(repo, consumers, describe, options, report)
        if metrics is not None and report.horizon_seconds is not None:
            metrics.horizon.set(report.horizon_seconds)
        if rotation is not None:
            await _rotate(repo, rotation, options, report)
    except LockTimeoutError as exc:
        report.hold = Hold.LOCK_TIMEOUT
        log.warning("dedup rotation postponed", error=str(exc))
    except SpectralError as exc:
        report.error = str(exc)
        log.warning("dedup maintenance failed", error=str(exc))
    if metrics is not None:
        await _remembered(repo, metrics)


async def _remembered(repo: MaintenanceRepository, metrics: MaintenanceMetrics) -> None:
    """Age of the oldest generation still remembered (left unset while it is the one that
    holds every key since the beginning)."""
    try:
        generations = await repo.dedup_generations()
        now = await repo.clock()
    except SpectralError:
        return
    oldest = min(g.started_at for g in generations if g.live)
    if oldest.year > 1:  # year 1: -infinity, every key since the beginning
        metrics.remembered_for.set((now - oldest).total_seconds())


async def _redrive_bounds(
    repo: MaintenanceRepository,
    describe: DescribeRetention,
    options: MaintenanceOptions,
    report: DedupReport,
    *,
    now: datetime,
    lifetime: timedelta,
) -> list[datetime] | None:
    """The bounds recent redrives put on the cutoff (None: held, reason in the report)."""
    recent = await repo.recent_redrives(now - lifetime)
    if not recent:
        return []
    try:
        broker = await describe([topic for topic, _ in recent])
    except SpectralError as exc:
        report.hold = Hold.BROKER_UNAVAILABLE
        log.warning("dedup rotation postponed: broker unavailable", error=str(exc))
        return None
    by_topic = {t.topic: t for t in broker.topics}
    bounds = []
    for topic, first in recent:
        dlq = by_topic.get(topic)
        life = dlq.readable_for(broker.check_interval_ms) if dlq is not None else None
        if life is None:
            report.unbounded_topics.append(topic)
            continue
        bounds.append(redrive_bound(first, life + options.grace, lifetime))
    if report.unbounded_topics:
        report.hold = Hold.RETENTION_UNBOUNDED
        return None
    return bounds


async def _rotate(
    repo: MaintenanceRepository,
    rotation: DedupRotation,
    options: MaintenanceOptions,
    report: DedupReport,
) -> None:
    if options.dry_run:
        if rotation.forget is not None:
            report.forgotten_rows = await repo.estimated_rows(
                f"core.event_handled_{rotation.forget.slot}"
            )
    else:
        report.forgotten_rows = await repo.rotate_dedup(rotation, options.lock_timeout)
    report.hold = Hold.NONE
    report.forgotten_generation = rotation.forget.generation if rotation.forget else None
    report.started = rotation.new_generation


async def _plan_dedup(
    repo: MaintenanceRepository,
    consumers: Mapping[str, Sequence[str]],
    describe: DescribeRetention,
    options: MaintenanceOptions,
    report: DedupReport,
) -> DedupRotation | None:
    generations = await repo.dedup_generations()
    previous = [g for g in generations if g.live and g.ended_at is not None]
    present = await repo.consumers_in_slot(previous[0].slot) if previous else []
    report.consumers = present
    report.unknown_consumers = sorted(set(present) - set(consumers))
    if report.unknown_consumers:
        report.hold = Hold.UNKNOWN_CONSUMER
        return None
    topics = sorted({t for name in present for t in consumers[name]})
    lifetime = options.grace
    if topics:
        try:
            broker = await describe(topics)
        except SpectralError as exc:
            report.hold = Hold.BROKER_UNAVAILABLE
            log.warning("dedup rotation postponed: broker unavailable", error=str(exc))
            return None
        report.unbounded_topics = [t.topic for t in broker.topics if t.unbounded]
        if report.unbounded_topics:
            report.hold = Hold.RETENTION_UNBOUNDED
            return None
        bounds = [t.readable_for(broker.check_interval_ms) for t in broker.topics]
        lifetime += max((b for b in bounds if b is not None), default=timedelta(0))
    horizon = horizon_of(lifetime, options.min_dedup_horizon)
    report.lifetime_seconds = lifetime.total_seconds()
    report.horizon_seconds = horizon.total_seconds()
    now = await repo.clock()
    redrives = (
        await _redrive_bounds(repo, describe, options, report, now=now, lifetime=lifetime)
        if topics
        else []
    )
    if redrives is None:
        return None
    cutoff = dedup_cutoff(now, horizon, lifetime, await repo.outbox_generations(), redrives)
    report.cutoff = cutoff.at
    decision = plan_dedup(generations, cutoff, lifetime)
    if isinstance(decision, Hold):
        report.hold = decision
        return None
    return decision
