"""The idempotent consumer engine.

Runs one handler (a consumer deployment) as a member of a Kafka consumer group and guarantees:

* exactly-once effects: the dedup row in ``core.event_handled`` is written in the same
  transaction as the handler's effect, and offsets are committed only after that commit;
* nothing lost: every fetched record ends applied, deduplicated, stale, or in ``T.dlq`` with
  its reason before its offset is committed; a poison record never blocks its partition;
* infrastructure faults pause and retry (capped exponential backoff) — they never dead-letter.

One batch = one transaction with set-based SQL (the dedup insert is one statement over arrays;
handlers do the same). See handler.py for the per-batch flow.

Pipelining: while batch N's transaction, dead letters and offset commit run (a task holding
``batch_lock``), the loop fetches and decodes the next batches, up to :data:`PIPELINE_DEPTH`
batches ahead, yielding to the event loop every few dozen records so N's statements keep
moving. Each batch's task waits for the one before it and applies only if that one succeeded,
so batches still apply, commit and acknowledge strictly in order and a failed batch's records
are never skipped by a later commit; before a batch is applied, its records of partitions
revoked in the meantime are dropped (their new owner reads them from the committed offset).

Replays (spectral/consumer/replay.py) run the same path with three seams: an ``Assignment``
(fixed partitions from/to fixed offsets, outside any consumer group, no offset commits, return
at the end), a ``connections`` source (e.g. one connection holding one transaction across
batches, each batch a savepoint) and a ``dead_letter_sink`` (report dead letters instead of
producing them).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import asyncpg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError
from prometheus_client import REGISTRY, CollectorRegistry

from contracts import DecodeError, EventEnvelope, check_record_key, decode
from spectral.consumer.handler import (
    AfterCommit,
    BatchReport,
    Delivery,
    Handler,
    HandlerResult,
    Outcome,
    Rejection,
)
from spectral.consumer.metrics import ConsumerMetrics
from spectral.db.connect import create_pool, is_transient
from spectral.db.queries import load_queries
from spectral.errors import PermanentError, SpectralError, TransientError
from spectral.kafka.config import client_kwargs, producer_kwargs
from spectral.kafka.dlq import MAX_REQUEST_BYTES, DeadLetter
from spectral.kafka.topics import dlq_topic, topic_for
from spectral.observability.logging import get_logger
from spectral.observability.progress import EngineHook
from spectral.retry import Backoff
from spectral.settings import Settings

log = get_logger(__name__)

_SQL = load_queries(Path(__file__).with_name("queries.sql"))
DECODE_SLICE = 64
"""Records decoded between two yields to the event loop while a batch is in flight (~2 ms:
each of the in-flight batch's statement replies waits at most that long for the loop)."""
PIPELINE_DEPTH = 2
"""Batches fetched and decoded ahead of the one being applied. With one, the loop idled while
a batch it had already decoded waited for the previous one's database round trips."""
FETCH_MAX_BYTES = 64 * 1024 * 1024
PARTITION_FETCH_BYTES = 1024 * 1024
"""Per partition and fetch (Kafka's default). The fetcher prefetches every assigned partition,
so this bounds what waits in memory: 8 MiB here kept ~70 MiB more resident on a 6-partition
topic for no throughput. A record batch larger than this is still returned whole."""

Decoder = Callable[[bytes], EventEnvelope[Any]]
ConnectionSource = Callable[[], AbstractAsyncContextManager[Any]]
"""Lends the connection a batch runs on (default: the engine's pool)."""
DeadLetterSink = Callable[[Sequence[DeadLetter]], Awaitable[None]]
"""Takes a batch's dead letters instead of producing them (dry runs)."""


@dataclass(frozen=True)
class Assignment:
    """Read fixed partitions from ``start`` up to ``end`` (exclusive) outside any consumer
    group: no group membership, no offset commits; ``run`` returns once every partition's
    position reached its end."""

    start: Mapping[TopicPartition, int]
    end: Mapping[TopicPartition, int]


@dataclass(frozen=True)
class EngineOptions:
    group: str | None = None
    max_batch: int = 2000
    poll_timeout_ms: int = 200
    stop_when_idle: float | None = None
    periodic_interval: float = 30.0
    auto_offset_reset: str = "earliest"
    backoff: Backoff = field(default_factory=lambda: Backoff(base=0.5, cap=10.0))
    assignment: Assignment | None = None


@dataclass(frozen=True)
class _Decoded:
    """A fetched batch, decoded, waiting for its transaction."""

    records: Sequence[Any]
    deliveries: list[Delivery]
    dead: list[DeadLetter]
    seconds: float
    """Time spent decoding (counted in the batch's duration; the wait for the batch before
    it is not)."""


@dataclass
class RunSummary:
    """Totals of one ``run``: outcomes counted over every batch."""

    counts: dict[Outcome, int] = field(default_factory=lambda: dict.fromkeys(Outcome, 0))
    facts: dict[str, int] = field(default_factory=dict)
    batches: int = 0
    records: int = 0
    # With an Assignment: True once every partition reached its end (not when stopped early).
    complete: bool = False

    def add(self, report: BatchReport) -> None:
        self.batches += 1
        for outcome, count in report.counts.items():
            self.counts[outcome] += count
            self.records += count
        for name, value in report.facts.items():
            self.facts[name] = self.facts.get(name, 0) + value


class _Revocations(ConsumerRebalanceListener):  # type: ignore[misc]
    """Before partitions move, wait for the in-flight batch (which commits its own offsets)."""

    def __init__(self, engine: ConsumerEngine) -> None:
        self._engine = engine

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        async with self._engine.batch_lock:
            self._engine.hook.revoked(revoked)
        if revoked:
            log.info(
                "partitions revoked", partitions=[f"{tp.topic}:{tp.partition}" for tp in revoked]
            )

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        self._engine.hook.assigned(assigned)
        if assigned:
            log.info(
                "partitions assigned", partitions=[f"{tp.topic}:{tp.partition}" for tp in assigned]
            )


class ConsumerEngine:
    """Consume the handler's topics and apply each event exactly once."""

    def __init__(
        self,
        handler: Handler,
        settings: Settings,
        *,
        kafka_bootstrap: str,
        database_url: str,
        options: EngineOptions | None = None,
        registry: CollectorRegistry = REGISTRY,
        decoder: Decoder = decode,
        connections: ConnectionSource | None = None,
        dead_letter_sink: DeadLetterSink | None = None,
        hook: EngineHook | None = None,
    ) -> None:
        self.handler = handler
        self.hook = hook or EngineHook()
        self.settings = settings
        self.options = options or EngineOptions()
        self.metrics = ConsumerMetrics(registry, handler.name)
        self.batch_lock = asyncio.Lock()
        self.summary = RunSummary()
        self._bootstrap = kafka_bootstrap
        self._database_url = database_url
        self._decode = decoder
        self._connections = connections
        self._sink = dead_letter_sink
        self._remaining: set[TopicPartition] = set()
        self._stop = asyncio.Event()
        self._topics = {topic_for(t, settings.topic_prefix): t for t in handler.event_types}
        self._pool: asyncpg.Pool | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self._in_flight: collections.deque[asyncio.Task[BatchReport]] = collections.deque()

    # -- lifecycle -------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the run loop to finish the current batch, commit, leave the group and return."""
        self._stop.set()

    async def run(self) -> RunSummary:
        """Consume until stopped (SIGTERM/SIGINT, ``stop()``, or idle for ``stop_when_idle``)."""
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self.stop)
                installed.append(sig)
        try:
            await self._start()
            await self._loop()
            await self._settle_all()  # batches in flight commit before the group is left
        finally:
            await self._abandon()
            for sig in installed:
                loop.remove_signal_handler(sig)
            await self._close()
        return self.summary

    async def _start(self) -> None:
        role = getattr(self.handler, "database_role", None)
        self._pool = await self._with_retry(
            "database", lambda: create_pool(self._database_url, role=role, min_size=1, max_size=2)
        )
        kafka = client_kwargs(self.settings, self._bootstrap)
        self._producer = AIOKafkaProducer(
            **producer_kwargs(self.settings, self._bootstrap),
            linger_ms=5,
            max_request_size=MAX_REQUEST_BYTES,  # dead letters carry the original bytes
        )
        assignment = self.options.assignment
        self._consumer = AIOKafkaConsumer(
            **kafka,
            group_id=None if assignment else self.options.group or self.handler.name,
            client_id=f"spectral-{self.handler.name}",
            enable_auto_commit=False,
            auto_offset_reset=self.options.auto_offset_reset,
            max_poll_records=self.options.max_batch,
            fetch_max_bytes=FETCH_MAX_BYTES,
            max_partition_fetch_bytes=PARTITION_FETCH_BYTES,
            max_poll_interval_ms=600_000,
            isolation_level="read_committed",
        )
        await self._with_retry("kafka", self._producer.start)
        await self._with_retry("kafka", self._consumer.start)
        if assignment is None:
            self._consumer.subscribe(topics=list(self._topics), listener=_Revocations(self))
        else:
            self._remaining = {
                tp for tp, off in assignment.start.items() if off < assignment.end[tp]
            }
            self._consumer.assign(sorted(self._remaining))
            for tp in self._remaining:
                self._consumer.seek(tp, assignment.start[tp])
        await self.hook.started(self._consumer, self._pool)
        log.info("consumer started", consumer=self.handler.name, topics=sorted(self._topics))

    async def _close(self) -> None:
        # A handler with work of its own in flight (the work executor's paid calls) finishes it
        # first, within its own bound, so a graceful stop does not strand leased items.
        await self.hook.stopped()
        closer = getattr(self.handler, "aclose", None)
        if closer is not None:
            try:
                await closer()
            except Exception as exc:  # noqa: BLE001 - closing: report, then close the rest
                log.warning("handler close failed", consumer=self.handler.name, error=str(exc))
        if self._consumer is not None:
            try:
                await self._consumer.stop()  # leaves the group
            except asyncio.CancelledError:
                # aiokafka's group-less coordinator (an Assignment) may surface the cancellation
                # of its own internal task when stopped soon after it started; a cancellation
                # of this task itself still propagates.
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise
            except Exception:  # noqa: BLE001, S110 - closing: nothing left to do about it
                pass
        if self._producer is not None:
            with contextlib.suppress(Exception):
                await self._producer.stop()
        if self._pool is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._pool.close(), timeout=5)
        log.info(
            "consumer stopped",
            consumer=self.handler.name,
            batches=self.summary.batches,
            **{o.value: n for o, n in self.summary.counts.items()},
        )

    async def _loop(self) -> None:
        assert self._consumer is not None  # noqa: S101 - started above
        last_record = time.monotonic()
        last_periodic = 0.0
        while not self._stop.is_set():
            if self.options.assignment is not None and not await self._unfinished():
                self.summary.complete = True
                return
            while self._in_flight and self._in_flight[0].done():
                await self._settle()  # count it now; a failure surfaces at once
            if time.monotonic() - last_periodic >= self.options.periodic_interval:
                await self._settle_all()  # periodic chores never run beside a batch
                await self._periodic()
                last_periodic = time.monotonic()
            try:
                fetched = await self._consumer.getmany(
                    timeout_ms=self.options.poll_timeout_ms, max_records=self.options.max_batch
                )
            except KafkaError as exc:
                self.metrics.retried("kafka")
                log.warning("fetch failed; retrying", error=str(exc))
                await asyncio.sleep(self.options.backoff.base)
                continue
            records = [r for batch in fetched.values() for r in batch]
            if self.options.assignment is not None:
                end = self.options.assignment.end
                records = [
                    r for r in records if r.offset < end[TopicPartition(r.topic, r.partition)]
                ]
            if not records:
                idle = self.options.stop_when_idle
                if idle is not None and time.monotonic() - last_record >= idle:
                    log.info("idle; stopping", consumer=self.handler.name, idle_seconds=idle)
                    return
                continue
            last_record = time.monotonic()
            decoded = await self._decode_batch(records, cooperative=bool(self._in_flight))
            while len(self._in_flight) >= PIPELINE_DEPTH:
                await self._settle()
            previous = self._in_flight[-1] if self._in_flight else None
            self._in_flight.append(asyncio.create_task(self._finish(decoded, previous)))

    async def _settle(self) -> None:
        """Wait for the oldest batch in flight (if any) and count it; its failure propagates."""
        if self._in_flight:
            self.summary.add(await self._in_flight[0])
            self._in_flight.popleft()

    async def _settle_all(self) -> None:
        while self._in_flight:
            await self._settle()

    async def _abandon(self) -> None:
        """The run failed or was cancelled: cancel the batches in flight. A transaction rolls
        back, or it committed and its offsets did not: redelivered, then deduplicated."""
        tasks, self._in_flight = list(self._in_flight), collections.deque()
        for task in reversed(tasks):  # the later ones first: none of them starts applying
            if not task.done():
                task.cancel()
        for task in tasks:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await task

    async def _unfinished(self) -> bool:
        """With an Assignment: pause the partitions that reached their end; any left?"""
        assert self._consumer is not None  # noqa: S101
        assert self.options.assignment is not None  # noqa: S101
        end = self.options.assignment.end
        for tp in list(self._remaining):
            if await self._consumer.position(tp) >= end[tp]:
                self._remaining.discard(tp)
                self._consumer.pause(tp)
        return bool(self._remaining)

    async def _periodic(self) -> None:
        periodic = getattr(self.handler, "periodic", None)
        if periodic is None or self._pool is None:
            return
        try:
            await periodic(self._pool)
        except Exception as exc:  # noqa: BLE001 - periodic chores never stop consumption
            log.warning("periodic task failed", consumer=self.handler.name, error=str(exc))

    # -- one batch -------------------------------------------------------------------------

    async def process(self, records: Sequence[Any]) -> BatchReport:
        """Decode, apply in one transaction, dead-letter, commit offsets. Returns the counts."""
        started = time.perf_counter()
        deliveries, dead = self._decode_all(records)
        return await self._complete(records, deliveries, dead, started)

    async def _decode_batch(self, records: Sequence[Any], *, cooperative: bool) -> _Decoded:
        """Decode a fetched batch; ``cooperative``: yield to the loop every DECODE_SLICE
        records (a batch is in flight and its statements must keep moving)."""
        started = time.perf_counter()
        if not cooperative or len(records) <= DECODE_SLICE:
            deliveries, dead = self._decode_all(records)
            return _Decoded(records, deliveries, dead, time.perf_counter() - started)
        deliveries, dead = [], []
        busy = 0.0
        for index in range(0, len(records), DECODE_SLICE):
            slice_started = time.perf_counter()
            more, more_dead = self._decode_all(records[index : index + DECODE_SLICE])
            deliveries.extend(more)
            dead.extend(more_dead)
            busy += time.perf_counter() - slice_started
            await asyncio.sleep(0)
        return _Decoded(records, deliveries, dead, busy)

    async def _finish(
        self, decoded: _Decoded, previous: asyncio.Task[BatchReport] | None
    ) -> BatchReport:
        """Apply a decoded batch under ``batch_lock`` (revocations wait for it), once the batch
        before it (``previous``) has succeeded: after a failure, committing this batch's offsets
        would skip the failed batch's records."""
        if previous is not None:
            await asyncio.wait([previous])
            if previous.cancelled() or previous.exception() is not None:
                raise asyncio.CancelledError
        async with self.batch_lock:
            records, deliveries, dead = self._owned(decoded)
            if not records:
                return BatchReport(counts=dict.fromkeys(Outcome, 0), facts={})
            started = time.perf_counter() - decoded.seconds
            return await self._complete(records, deliveries, dead, started)

    def _owned(self, decoded: _Decoded) -> tuple[Sequence[Any], list[Delivery], list[DeadLetter]]:
        """The batch without its records of partitions revoked since they were fetched."""
        if self.options.assignment is not None or self._consumer is None:
            return decoded.records, decoded.deliveries, decoded.dead
        assigned = self._consumer.assignment()  # TopicPartition is a (topic, partition) tuple
        gone = {(r.topic, r.partition) for r in decoded.records} - set(assigned)
        if not gone:
            return decoded.records, decoded.deliveries, decoded.dead
        log.info(
            "dropping fetched records of revoked partitions",
            consumer=self.handler.name,
            partitions=sorted(f"{t}:{p}" for t, p in gone),
        )
        return (
            [r for r in decoded.records if (r.topic, r.partition) not in gone],
            [d for d in decoded.deliveries if (d.topic, d.partition) not in gone],
            [d for d in decoded.dead if (d.source_topic, d.source_partition) not in gone],
        )

    async def _complete(
        self,
        records: Sequence[Any],
        deliveries: list[Delivery],
        dead: list[DeadLetter],
        started: float,
    ) -> BatchReport:
        self.metrics.consumed.inc(len(records))
        counts = dict.fromkeys(Outcome, 0)
        facts: dict[str, int] = {}
        result = HandlerResult()
        if deliveries:
            result, fresh_count, duplicates = await self._apply(deliveries, dead)
            counts[Outcome.DEDUPLICATED] = duplicates
            counts[Outcome.STALE] = len(result.stale)
            counts[Outcome.APPLIED] = fresh_count - len(result.stale) - len(result.rejected)
            facts = dict(result.facts)
        counts[Outcome.DEAD_LETTERED] = len(dead)
        await self._dead_letter(dead)
        await self._commit_offsets(records)
        if isinstance(self.handler, AfterCommit) and deliveries:
            await self._with_retry("database", lambda: self.handler.after_commit(result))  # type: ignore[attr-defined]
        for outcome in (Outcome.APPLIED, Outcome.STALE, Outcome.DEDUPLICATED):
            self.metrics.outcomes[outcome].inc(counts[outcome])
        elapsed = time.perf_counter() - started
        self.metrics.batch_size.observe(len(records))
        self.metrics.batch_duration.observe(elapsed)
        log.info(
            "batch",
            consumer=self.handler.name,
            records=len(records),
            seconds=round(elapsed, 4),
            **{o.value: n for o, n in counts.items()},
            **facts,
        )
        return BatchReport(counts=counts, facts=facts)

    def _decode_all(self, records: Sequence[Any]) -> tuple[list[Delivery], list[DeadLetter]]:
        deliveries: list[Delivery] = []
        dead: list[DeadLetter] = []
        for record in records:
            value: bytes = record.value if record.value is not None else b""
            try:
                envelope = self._decode(value)
                check_record_key(envelope, record.key)
            except DecodeError as exc:
                dead.append(self._dead(record, exc.reason.value, exc.detail))
                continue
            expected = self._topics.get(record.topic)
            if envelope.event_type != expected:
                dead.append(
                    self._dead(
                        record,
                        "unexpected_event_type",
                        f"{envelope.event_type!r} on the topic of {expected!r}",
                    )
                )
                continue
            deliveries.append(
                Delivery(
                    envelope=envelope,
                    topic=record.topic,
                    partition=record.partition,
                    offset=record.offset,
                    key=record.key,
                    raw=value,
                    timestamp_ms=record.timestamp or 0,
                    headers=tuple(record.headers or ()),
                )
            )
        return deliveries, dead

    def _dead(self, record: Any, reason: str, detail: str) -> DeadLetter:
        return DeadLetter(
            reason=reason,
            detail=detail,
            source_topic=record.topic,
            source_partition=record.partition,
            source_offset=record.offset,
            consumer=self.handler.name,
            key=record.key,
            value=record.value if record.value is not None else b"",
            original_headers=tuple(record.headers or ()),
        )

    async def _apply(
        self, deliveries: list[Delivery], dead: list[DeadLetter]
    ) -> tuple[HandlerResult, int, int]:
        """Apply the batch in one transaction; fall back to one-by-one on a data error."""
        # First occurrence of each key wins inside a batch; later ones are duplicates.
        unique: dict[str, Delivery] = {}
        for delivery in deliveries:
            unique.setdefault(delivery.idempotency_key, delivery)
        in_batch_duplicates = len(deliveries) - len(unique)
        batch = list(unique.values())
        errored = 0
        try:
            result, fresh = await self._with_retry("database", lambda: self._transaction(batch))
        except PermanentError as exc:
            log.warning(
                "batch failed for a data reason; applying one by one",
                consumer=self.handler.name,
                error=str(exc),
            )
            result, fresh, errored = await self._one_by_one(batch, dead)
        dead.extend(self._rejected(rejection) for rejection in result.rejected)
        duplicates = in_batch_duplicates + len(batch) - fresh - errored
        return result, fresh, duplicates

    async def _transaction(self, batch: list[Delivery]) -> tuple[HandlerResult, int]:
        assert self._pool is not None  # noqa: S101
        try:
            lend = self._connections or self._pool.acquire
            async with lend() as conn, conn.transaction():
                fresh_keys = {
                    row[0]
                    for row in await conn.fetch(
                        _SQL["claim_keys"],
                        self.handler.name,
                        [d.idempotency_key for d in batch],
                        [d.envelope.event_id for d in batch],
                        [d.partition for d in batch],
                        [d.offset for d in batch],
                    )
                }
                fresh = [d for d in batch if d.idempotency_key in fresh_keys]
                result = (
                    await self.handler.apply(cast("asyncpg.Connection", conn), fresh)
                    if fresh
                    else HandlerResult()
                )
                if result.stale:
                    await conn.execute(_SQL["mark_stale"], self.handler.name, sorted(result.stale))
                if result.rejected:
                    await conn.execute(
                        _SQL["forget"],
                        self.handler.name,
                        [r.delivery.idempotency_key for r in result.rejected],
                    )
        except SpectralError:
            raise
        except Exception as exc:
            if is_transient(exc):
                raise TransientError(f"{type(exc).__name__}: {exc}") from exc
            raise PermanentError(f"{type(exc).__name__}: {exc}") from exc
        return result, len(fresh)

    async def _one_by_one(
        self, batch: list[Delivery], dead: list[DeadLetter]
    ) -> tuple[HandlerResult, int, int]:
        """Each delivery in its own transaction; returns (merged result, fresh, errored)."""
        merged = HandlerResult()
        fresh_total = 0
        errored = 0
        for delivery in batch:
            try:
                result, fresh = await self._with_retry(
                    "database",
                    lambda d=delivery: self._transaction([d]),  # type: ignore[misc]
                )
            except PermanentError as exc:
                errored += 1
                dead.append(
                    DeadLetter(
                        reason="handler_error",
                        detail=str(exc),
                        source_topic=delivery.topic,
                        source_partition=delivery.partition,
                        source_offset=delivery.offset,
                        consumer=self.handler.name,
                        key=delivery.key,
                        value=delivery.raw,
                        original_headers=delivery.headers,
                    )
                )
                continue
            fresh_total += fresh
            merged.stale |= result.stale
            merged.rejected.extend(result.rejected)
            for name, value in result.facts.items():
                merged.facts[name] = merged.facts.get(name, 0) + value
        return merged, fresh_total, errored

    def _rejected(self, rejection: Rejection) -> DeadLetter:
        d = rejection.delivery
        return DeadLetter(
            reason="handler_rejected",
            detail=f"{rejection.reason}: {rejection.detail}",
            source_topic=d.topic,
            source_partition=d.partition,
            source_offset=d.offset,
            consumer=self.handler.name,
            key=d.key,
            value=d.raw,
            original_headers=d.headers,
        )

    async def _dead_letter(self, dead: list[DeadLetter]) -> None:
        if not dead:
            return
        # Dead letters keep their source order (per partition), whatever step refused them.
        dead.sort(key=lambda d: (d.source_topic, d.source_partition, d.source_offset))
        if self._sink is not None:
            await self._sink(dead)
            for letter in dead:
                self.metrics.dead_lettered(letter.reason)
            return
        assert self._producer is not None  # noqa: S101
        producer = self._producer

        async def send(letter: DeadLetter) -> Any:  # the delivery future
            return await producer.send(
                dlq_topic(letter.source_topic),
                value=letter.value,
                key=letter.key,
                headers=letter.headers(),
            )

        async def send_all() -> None:
            futures = []
            for index, letter in enumerate(dead):
                try:
                    futures.append(await send(letter))
                except KafkaError as exc:
                    if exc.retriable:
                        raise
                    # The broker or client can never take these bytes (e.g. over the size
                    # limit): dead-letter a reference instead. The original stays readable at
                    # its source topic/partition/offset, which the headers name.
                    reference = dead[index] = letter.as_reference(str(exc))
                    futures.append(await send(reference))
            await asyncio.gather(*futures)

        await self._with_retry("kafka", send_all)
        for letter in dead:
            self.metrics.dead_lettered(letter.reason)
            log.warning(
                "dead letter",
                consumer=self.handler.name,
                reason=letter.reason,
                detail=letter.detail[:300],
                topic=letter.source_topic,
                partition=letter.source_partition,
                offset=letter.source_offset,
            )

    async def _commit_offsets(self, records: Sequence[Any]) -> None:
        if self.options.assignment is not None:
            return  # outside any group: a replay commits nothing
        assert self._consumer is not None  # noqa: S101
        consumer = self._consumer
        ends: dict[tuple[str, int], int] = {}
        for record in records:
            where = (record.topic, record.partition)
            if record.offset >= ends.get(where, -1):
                ends[where] = record.offset + 1
        assigned = consumer.assignment()
        owned = {
            TopicPartition(topic, partition): offset
            for (topic, partition), offset in ends.items()
            if (topic, partition) in assigned
        }
        if owned:
            try:
                await self._with_retry("kafka", lambda: consumer.commit(owned))
            except (CommitFailedError, IllegalStateError) as exc:
                # The partitions moved to another member mid-batch: it re-reads from the last
                # committed offset and finds these events deduplicated.
                log.warning("offset commit refused after a rebalance", error=str(exc))
            else:
                self.hook.committed(owned)

    # -- infrastructure retries ---------------------------------------------------------------

    async def _with_retry(self, component: str, operation: Callable[[], Any]) -> Any:
        """Await ``operation()`` until it succeeds; only transient faults are retried."""
        attempt = 0
        while True:
            try:
                return await operation()
            except (CommitFailedError, IllegalStateError):
                raise
            except PermanentError:
                raise
            except Exception as exc:
                transient = (
                    bool(getattr(exc, "retriable", True))
                    if isinstance(exc, KafkaError)
                    else is_transient(exc)
                )
                if not transient:
                    raise
                attempt += 1
                if self._stop.is_set() and attempt > 3:  # noqa: PLR2004
                    raise TransientError(f"{component} unavailable while stopping: {exc}") from exc
                delay = self.options.backoff.delay(attempt)
                self.metrics.retried(component)
                log.warning(
                    "infrastructure fault; pausing before retry",
                    consumer=self.handler.name,
                    component=component,
                    attempt=attempt,
                    delay=delay,
                    error=f"{type(exc).__name__}: {exc}",
                )
                await asyncio.sleep(delay)
