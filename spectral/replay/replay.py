"""Replay: run a consumer deployment's handler over a range of its topics, through the engine.

The records go through the same path as in the live consumer — decode, dedup in
``core.event_handled``, the handler's stale guard, dead letters — because it IS the engine
(spectral/engine/engine.py), given a :class:`~spectral.kafka.transport.FixedRange` source:

* no consumer group at all: the partitions are assigned by hand, read from the range's start
  and never committed, so the live group's offsets are untouched and there is no throwaway
  group to clean up afterwards;
* the range ends at the end offsets captured when the replay starts (or ``--to-*``): records
  published meanwhile are left to the live consumer, and the replay returns once every
  partition reached its end;
* the handler runs without its background work (``start`` and ``periodic`` are for a live
  member only: no churn gauge, no executor sweep): a replay does only what its records ask for.

Three modes:

``APPLY``    each batch commits as in the live consumer (effects exactly once: what was applied
             is deduplicated, what is older than the stored state is stale); dead letters are
             produced (with the live consumer's fallbacks: a reference, then the table
             ``core.dead_letters``); ``after_commit`` runs and the handler's in-flight work is
             drained.
``DRY_RUN``  one transaction held across every batch (each batch a savepoint) and rolled back:
             the report says what would change per table (``pg_stat_xact_user_tables``) and
             what would be dead-lettered; nothing is produced, ``after_commit`` never runs (no
             paid work), and the handler's own connections are read-only sessions
             (``default_transaction_read_only``): the only writes possible are the rolled-back
             ones.
``ATOMIC``   the same single transaction, committed only when every partition reached its end
             (the rebuild): readers see the old state until the one commit; an interrupted run
             changes nothing. Optional hooks run first and last inside that transaction.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg
from aiokafka import TopicPartition
from prometheus_client import CollectorRegistry

from spectral.db.connect import connect
from spectral.engine.dead_letters import DeadLetterNote, ReportedDeadLetters
from spectral.engine.engine import ConsumerEngine, EngineOptions
from spectral.engine.handler import Handler, Outcome
from spectral.engine.source import FixedRange
from spectral.engine.transaction import Connections
from spectral.observability.logging import get_logger
from spectral.replay.guard import BeyondHorizonError, check_replay_horizon
from spectral.replay.held_transaction import HeldTransaction, TableChange
from spectral.replay.range import PartitionRange, Start, Stop
from spectral.replay.ranges import plan_ranges
from spectral.settings import Settings

log = get_logger(__name__)


class Mode(StrEnum):
    APPLY = "apply"
    DRY_RUN = "dry_run"
    ATOMIC = "atomic"


HandlerFactory = Callable[[str], Handler[Any]]
"""Builds the handler, given the database URL it may open connections of its own with."""

Progress = Callable[[int, int], None]
"""Called with (records done, records in the range at most) while the replay runs."""


class TransactionHooks(Protocol):
    """Statements run inside the single transaction (DRY_RUN, ATOMIC) before the first batch
    and after the last; ``finish`` returns facts for the report."""

    async def prepare(self, conn: asyncpg.Connection) -> None: ...

    async def finish(self, conn: asyncpg.Connection) -> Mapping[str, int]: ...


@dataclass(frozen=True)
class ReplayRequest:
    start: Start
    stop: Stop | None = None
    mode: Mode = Mode.APPLY
    max_batch: int = 2000
    idle_timeout: float = 60.0
    """Give up (report incomplete) when no record arrives for this long before the end."""
    beyond_horizon: bool = False
    """Replay even records older than the dedup horizon (spectral/replay/guard.py)."""


@dataclass(frozen=True)
class ReplayReport:
    replay_id: str
    consumer: str
    mode: Mode
    ranges: tuple[PartitionRange, ...]
    counts: Mapping[Outcome, int]
    records: int
    complete: bool
    committed: bool
    seconds: float
    facts: Mapping[str, int] = field(default_factory=dict)
    dead_letter_reasons: Mapping[str, int] = field(default_factory=dict)
    dead_letters: tuple[DeadLetterNote, ...] = ()
    changes: tuple[TableChange, ...] = ()
    hook_facts: Mapping[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(r.size for r in self.ranges)

    def to_json(self) -> dict[str, Any]:
        return {
            "replay_id": self.replay_id,
            "consumer": self.consumer,
            "mode": self.mode.value,
            "complete": self.complete,
            "committed": self.committed,
            "seconds": round(self.seconds, 3),
            "records": self.records,
            **{outcome.value: self.counts.get(outcome, 0) for outcome in Outcome},
            "dead_letter_reasons": dict(self.dead_letter_reasons),
            "ranges": [
                {"topic": r.topic, "partition": r.partition, "start": r.start, "end": r.end}
                for r in self.ranges
            ],
            "facts": dict(self.facts),
            "changes": [c.to_json() for c in self.changes],
            "would_dead_letter": [n.to_json() for n in self.dead_letters],
            **({"rebuild": dict(self.hook_facts)} if self.hook_facts else {}),
        }


def read_only_url(database_url: str) -> str:
    """``database_url`` whose sessions refuse every write (``default_transaction_read_only``)."""
    parts = urlsplit(database_url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)]
    query = [(k, v) for k, v in query if k != "default_transaction_read_only"]
    query.append(("default_transaction_read_only", "on"))
    return urlunsplit(parts._replace(query=urlencode(query)))


async def replay(
    make_handler: HandlerFactory,
    settings: Settings,
    *,
    kafka_bootstrap: str,
    database_url: str,
    request: ReplayRequest,
    hooks: TransactionHooks | None = None,
    progress: Progress | None = None,
) -> ReplayReport:
    """Replay the range of ``request`` through the handler ``make_handler`` builds."""
    started = time.monotonic()
    replay_id = uuid.uuid4().hex[:12]
    single = request.mode is not Mode.APPLY
    handler = make_handler(read_only_url(database_url) if single else database_url)
    try:
        ranges = await plan_ranges(
            settings, kafka_bootstrap, handler.event_types, request.start, request.stop
        )
        if request.mode is not Mode.ATOMIC:  # a rebuild forgets the consumer's keys itself
            horizon = await check_replay_horizon(
                settings,
                kafka_bootstrap,
                database_url,
                ranges,
                role=handler.database_role,
            )
            if horizon.reaches and request.mode is Mode.APPLY and not request.beyond_horizon:
                raise BeyondHorizonError(horizon.message())
            if horizon.reaches:
                log.warning("replay reaches behind the dedup horizon", detail=horizon.message())
        log.info(
            "replay starting",
            replay_id=replay_id,
            consumer=handler.name,
            mode=request.mode.value,
            records_at_most=sum(r.size for r in ranges),
            partitions=len(ranges),
        )
        run = _Run(handler, settings, kafka_bootstrap, database_url, request, ranges, progress)
        # The engine drains (APPLY) and closes the handler at the end of its run.
        report = await (_single_transaction(run, hooks) if single else _engine_run(run))
    finally:
        await handler.close()  # again, harmlessly: the engine may never have started
    final = ReplayReport(
        replay_id=replay_id,
        consumer=handler.name,
        mode=request.mode,
        ranges=tuple(ranges),
        counts=report.counts,
        records=report.records,
        complete=report.complete,
        committed=report.committed,
        seconds=time.monotonic() - started,
        facts=report.facts,
        dead_letter_reasons=report.dead_letter_reasons,
        dead_letters=report.dead_letters,
        changes=report.changes,
        hook_facts=report.hook_facts,
    )
    log.info(
        "replay finished",
        replay_id=replay_id,
        consumer=handler.name,
        mode=request.mode.value,
        complete=final.complete,
        committed=final.committed,
        **{o.value: n for o, n in final.counts.items()},
    )
    return final


@dataclass(frozen=True)
class _Run:
    handler: Handler[Any]
    settings: Settings
    bootstrap: str
    database_url: str
    request: ReplayRequest
    ranges: list[PartitionRange]
    progress: Progress | None


@dataclass(frozen=True)
class _Partial:
    counts: Mapping[Outcome, int]
    records: int
    complete: bool
    committed: bool
    facts: Mapping[str, int]
    dead_letter_reasons: Mapping[str, int]
    dead_letters: tuple[DeadLetterNote, ...] = ()
    changes: tuple[TableChange, ...] = ()
    hook_facts: Mapping[str, int] = field(default_factory=dict)


async def _single_transaction(run: _Run, hooks: TransactionHooks | None) -> _Partial:
    conn = await connect(run.database_url, role=run.handler.database_role)
    try:
        async with HeldTransaction(conn) as held:
            if hooks is not None:
                await hooks.prepare(conn)
            recorder = ReportedDeadLetters()
            done = await _engine_run(run, connections=held, sink=recorder)
            hook_facts: Mapping[str, int] = {}
            if hooks is not None and done.complete:
                hook_facts = await hooks.finish(conn)
            changes = tuple(held.changes())
            committed = run.request.mode is Mode.ATOMIC and done.complete
            if committed:
                await held.commit()
            else:
                await held.rollback()
    finally:
        await conn.close()
    return _Partial(
        counts=done.counts,
        records=done.records,
        complete=done.complete,
        committed=committed,
        facts=done.facts,
        dead_letter_reasons=done.dead_letter_reasons,
        dead_letters=tuple(recorder.notes),
        changes=changes,
        hook_facts=hook_facts,
    )


async def _engine_run(
    run: _Run,
    *,
    connections: Connections | None = None,
    sink: ReportedDeadLetters | None = None,
) -> _Partial:
    handler, request, ranges, progress = run.handler, run.request, run.ranges, run.progress
    engine = ConsumerEngine(
        handler,
        run.settings,
        kafka_bootstrap=run.bootstrap,
        database_url=run.database_url,
        # --max-batch bounds a replay's batches (a rebuild's savepoints): no growth.
        options=EngineOptions(
            max_batch=request.max_batch, batch_growth=1, stop_when_idle=request.idle_timeout
        ),
        registry=CollectorRegistry(),  # a replay's counts never mix with the live consumer's
        reading=FixedRange(
            start={TopicPartition(r.topic, r.partition): r.start for r in ranges},
            end={TopicPartition(r.topic, r.partition): r.end for r in ranges},
        ),
        connections=connections,
        dead_letter_sink=sink,
    )
    total = sum(r.size for r in ranges)
    task = asyncio.create_task(engine.run(), name=f"replay-{handler.name}")
    while not task.done():
        if progress is not None:
            progress(engine.summary.records, total)
        await asyncio.wait({task}, timeout=0.2)
    summary = await task
    if progress is not None:
        progress(summary.records, total)
    return _Partial(
        counts=dict(summary.counts),
        records=summary.records,
        complete=summary.complete,
        committed=request.mode is Mode.APPLY,
        facts=dict(summary.facts),
        dead_letter_reasons=dict(summary.dead_letter_reasons),
    )
