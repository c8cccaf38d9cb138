"""The idempotent consumer engine.

Runs one handler (a consumer deployment) with exactly-once effects (the dedup row is written in
the handler's transaction; offsets are committed only after it), nothing lost (every record ends
applied, deduplicated, stale or dead-lettered before its offset moves) and infrastructure faults
paused and retried, never dead-lettered. It composes four seams chosen once (source, decode,
batch transaction, dead-letter sink) around a pipelined loop; the record source owns its client
and tells the engine that partitions move through the one-way rebalance protocol the engine
implements (:class:`_Membership`). The guarantees, the seams and the pipelining are explained in
docs/explanation/consumer-engine.md, the transport seam in docs/explanation/transport.md.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import asyncpg
import structlog
from prometheus_client import REGISTRY, CollectorRegistry

from contracts import EventRegistry
from spectral.engine.dead_letters import DeadLetterSink, KafkaDeadLetters
from spectral.engine.decode import RecordDecoder
from spectral.engine.handler import BatchReport, Delivery, Handler, Outcome
from spectral.engine.metrics import ConsumerMetrics
from spectral.engine.retrying import Retrying
from spectral.engine.source import (
    FetchOptions,
    Reading,
    Subscription,
    Transport,
    configured_transport,
)
from spectral.engine.transaction import (
    BatchOutcome,
    BatchTransaction,
    Connections,
    EarlyClaim,
    PoolConnections,
)
from spectral.faults import Component, component_of, describe, is_transient
from spectral.kafka.codecs import require_codecs
from spectral.kafka.dlq import DeadLetter
from spectral.kafka.freshness import ready_at
from spectral.kafka.topics import group_for, topic_for
from spectral.kafka.transport import TopicPartition
from spectral.lifecycle import stopping_on_signals
from spectral.observability.logging import get_logger
from spectral.observability.outages import OUTAGES
from spectral.observability.progress import EngineHook
from spectral.plugins import installed_registry
from spectral.retry import Backoff
from spectral.settings import Settings

log = get_logger(__name__)

DECODE_SLICE = 64
"""Records decoded between two yields to the event loop while a batch is in flight (~2 ms:
each of the in-flight batch's statement replies waits at most that long for the loop)."""
POOL_SIZE = 4
"""Connections of the engine's pool: one batch's transaction, the next batch's claimed beside it
through a backlog (``EngineOptions.early_claim``), the batches before it acknowledging (their
dead letters fall back to a table when the broker refuses them), and the readiness probe's
``SELECT 1``."""
IDLE_PROBE_SECONDS = 5.0
"""How long ``stop_when_idle`` waits for the broker and the database to answer before the
idle time is judged an outage instead (and counted again from zero)."""
JOIN_PATIENCE_SECONDS = 30.0
"""How long ``stop_when_idle`` waits for a member's first assignment (possibly empty), and
after partitions moved (an assignment, a revocation, a loss) or an outage ended for the source
to say it has read its partitions to their end, before its idle time counts anyway: joining
takes a few heartbeats and a first fetch a few round trips, longer on a busy machine, a member
whose partitions were lost behind an outage is given them back only once it joined again, and
a member that stopped before read none of them."""


@dataclass(frozen=True)
class EngineOptions:
    group: str | None = None
    max_batch: int = 2000
    """Records per fetch, and per batch while the consumer keeps up."""
    batch_growth: int = 1
    """How far a backlog may grow a batch: up to ``batch_growth`` x ``max_batch`` records (one
    transaction, fewer round trips per record). A batch takes what the client already holds,
    doubling its target after a batch that reached it, and falls back to ``max_batch`` once a
    batch does not fill it (caught up: freshness first). 1 (the default): a batch is one fetch.
    Measured on the benchmark's stream (200,000 records, 6 partitions, 4,000 clusters; two
    alternated pairs of first passes, load ~0.5, 2026-12-04), growth to 4 x 2,000 made batches of
    3,100-3,400 records instead of 1,700 but no measurable saving in the consumer's or
    PostgreSQL's CPU per event (in one process, without Kafka, 8,000-record batches cost 2.6 us
    less of PostgreSQL than 2,000-record ones: fewer rows, a cluster seen twice is written
    once; as processes the spread between runs was larger), while it held ~42 MiB more resident
    (peak 144-146 against 102-103 MiB), made the resident size climb through the run (31-34
    against 1-2.5 MiB) and slowed the all-duplicates pass by 10-20 %: a batch that takes all the
    client holds (about 1 MiB per partition) leaves it nothing to hand over while it fetches
    again."""
    in_flight: int = 3
    """Batches handed over to be applied and acknowledged at once (the loop fetches and decodes
    the next one beside them). With three, one is acknowledged (dead letters, offsets), the next
    applied, and the one after it waits for that commit with its transaction ready: a slow
    acknowledgement (one broker round trip that did not get a core) does not idle the database
    between two transactions. With two, the decoded batch waited for the acknowledgement. A
    batch fetched while the last one handed over has not started its transaction joins it (up
    to ``max_batch`` records): one commit for both."""
    early_claim: bool = True
    """Through a backlog (a batch of at least half of ``max_batch`` records waiting), the next
    batch's transaction opens and claims its keys on a second connection while the batch before
    it runs its handler and commits (see ``ConsumerEngine._claim_early``): its claim does not
    wait for that commit. False: each batch's transaction starts once the one before it
    committed."""
    poll_timeout_ms: int = 200
    commit_interval: float = 0.0
    """Seconds between two offset commits of a live consumer: 0 (the default here) commits each
    batch's offsets once it is acknowledged; above 0 a batch's offsets are committed with a
    later batch's, at most every ``commit_interval`` seconds, when partitions are revoked
    (before they leave), when the consumer stops and when it waits idle. What a crash then
    re-reads is at most that much of the stream, which the dedup claim finds already handled:
    exactly once either way. Measured at 2,000 events/s in 20-record batches (2026-12-04):
    each offset commit cost ~68 us of the broker's CPU and ~56 us of the consumer's.
    ``spectral consume --commit-interval`` (0.5 s there)."""
    stop_when_idle: float | None = None
    periodic_interval: float = 30.0
    auto_offset_reset: str = "earliest"
    backoff: Backoff = field(default_factory=lambda: Backoff(base=0.5, cap=10.0))


@dataclass(frozen=True)
class _Decoded:
    """A fetched batch, decoded, waiting for its transaction."""

    records: Sequence[Any]
    deliveries: list[Delivery]
    dead: list[DeadLetter]
    seconds: float
    """Time spent decoding (counted in the batch's duration; the wait for the batch before
    it is not)."""
    epoch: int
    """The engine's revocation count when the records were fetched."""
    fetches: int = 1
    """Batches fetched one after another that make it (see ``ConsumerEngine._join``)."""
    decode_cpu: float = 0.0
    """CPU time the decoding took (the thread's clock: not the time the process waited for a
    core while it decoded) — reported per batch, so the decode's share of the process's CPU is
    measured where it runs."""

    def without(self, gone: Collection[TopicPartition]) -> _Decoded:
        """This batch less its records of the partitions ``gone``."""

        def kept(topic: str, partition: int) -> bool:
            return TopicPartition(topic, partition) not in gone

        return replace(
            self,
            records=[r for r in self.records if kept(r.topic, r.partition)],
            deliveries=[d for d in self.deliveries if kept(d.topic, d.partition)],
            dead=[d for d in self.dead if kept(d.source_topic, d.source_partition)],
        )


def _merged(parts: Sequence[_Decoded]) -> _Decoded:
    """Batches fetched one after another, as one: records, deliveries and dead letters in fetch
    order (so each partition's order holds), their decode times added."""
    if len(parts) == 1:
        return parts[0]
    return _Decoded(
        records=[r for part in parts for r in part.records],
        deliveries=[d for part in parts for d in part.deliveries],
        dead=[d for part in parts for d in part.dead],
        seconds=sum(part.seconds for part in parts),
        epoch=parts[-1].epoch,
        fetches=len(parts),
        decode_cpu=sum(part.decode_cpu for part in parts),
    )


@dataclass
class _Waiting:
    """The batches handed over as one transaction: fetched batches join it while its transaction
    has not started (see :meth:`ConsumerEngine._join`)."""

    parts: list[_Decoded]
    records: int
    sealed: bool = False
    """Its transaction started (or it gave up): nothing joins it any more."""
    keys: frozenset[str] | None = None
    """The idempotency keys its transaction applies, once it has its turn to apply (the next
    batch's early claim leaves them out: :meth:`BatchTransaction.claim_early`)."""
    holds_all: bool = False
    """Its transaction committed holding every one of ``keys`` (:attr:`BatchOutcome.holds_all`)."""


@dataclass
class _Staged:
    """A batch whose transaction committed, waiting to be acknowledged."""

    records: Sequence[Any]
    dead: list[DeadLetter]
    counts: dict[Outcome, int]
    facts: dict[str, int] = field(default_factory=dict)
    applied: BatchOutcome | None = None
    seconds: float = 0.0
    """Time spent decoding and in the transaction (not waiting for the batches before it)."""
    fetches: int = 1
    decode_cpu: float = 0.0


@dataclass(frozen=True)
class _InFlight:
    """A batch between its fetch and its acknowledgement: ``applied`` resolves once its
    transaction is over (True: committed, or nothing to apply; False: it failed or never ran),
    ``task`` once it is acknowledged (dead letters, offsets, ``after_commit``) or failed."""

    applied: asyncio.Future[bool]
    task: asyncio.Task[BatchReport]
    waiting: _Waiting
    turn: asyncio.Future[None]
    """Resolves once the batch has its turn to apply (the one before it committed), or it
    ended: the next batch may then claim its keys beside it (``EngineOptions.early_claim``)."""


def _failed(task: asyncio.Task[Any]) -> bool:
    return task.done() and (task.cancelled() or task.exception() is not None)


@dataclass
class RunSummary:
    """Totals of one ``run``: outcomes counted over every batch."""

    counts: dict[Outcome, int] = field(default_factory=lambda: dict.fromkeys(Outcome, 0))
    facts: dict[str, int] = field(default_factory=dict)
    dead_letter_reasons: Counter[str] = field(default_factory=Counter)
    batches: int = 0
    records: int = 0
    # From a range: True once every partition reached its end (not when stopped early).
    complete: bool = False

    def add(self, report: BatchReport) -> None:
        self.batches += 1
        for outcome, count in report.counts.items():
            self.counts[outcome] += count
            self.records += count
        for name, value in report.facts.items():
            self.facts[name] = self.facts.get(name, 0) + value
        self.dead_letter_reasons.update(report.dead_letter_reasons)


class _Membership:
    """The engine's side of the rebalance protocol (spectral.kafka.transport.Rebalance): the
    only way a source tells the engine that partitions move."""

    def __init__(self, engine: ConsumerEngine) -> None:
        self._engine = engine

    async def revoking(self, partitions: Collection[TopicPartition]) -> None:
        await self._engine._revoking(partitions)  # noqa: SLF001 - the engine's own helper

    def assigned(self, partitions: Collection[TopicPartition]) -> None:
        self._engine._assigned(partitions)  # noqa: SLF001 - the engine's own helper


class ConsumerEngine:
    """Consume the handler's topics and apply each event exactly once."""

    def __init__(
        self,
        handler: Handler[Any],
        settings: Settings,
        *,
        kafka_bootstrap: str | None = None,
        database_url: str | None = None,
        options: EngineOptions | None = None,
        registry: CollectorRegistry = REGISTRY,
        events: EventRegistry | None = None,
        transport: Transport | None = None,
        reading: Reading | None = None,
        connections: Connections | None = None,
        dead_letter_sink: DeadLetterSink | None = None,
        hook: EngineHook | None = None,
    ) -> None:
        """``transport``: the settings' Kafka client on ``kafka_bootstrap`` unless given (the
        in-memory broker of a test); ``reading``: a live member of ``options.group`` unless
        given (a fixed range for a replay); ``connections``: a pool of ``database_url`` unless
        given (a held transaction, a test's own connection: then the engine holds no pool and
        runs no ``periodic`` chores); ``dead_letter_sink``: ``T.dlq`` through the transport,
        with its fallbacks, unless given (a report); ``hook``: where the engine reports its
        start, partitions, commits and stop (a progress monitor); ``events``: the event types
        records are decoded with (spectral's and the installed plugins' unless given)."""
        self.handler = handler
        self.hook = hook or EngineHook()
        self.settings = settings
        self.options = options or EngineOptions()
        self.metrics = ConsumerMetrics(registry, handler.name)
        self.batch_lock = asyncio.Lock()
        self.summary = RunSummary()
        if transport is None:
            if kafka_bootstrap is None:
                msg = "a Kafka bootstrap is needed unless a transport is given"
                raise ValueError(msg)
            transport = configured_transport(settings, kafka_bootstrap)
        if reading is None:
            group = self.options.group or group_for(handler.name, settings.topic_prefix)
            reading = Subscription(group, self.options.auto_offset_reset)
        self.transport = transport
        self.source = transport.source(
            reading,
            FetchOptions(client_id=f"spectral-{handler.name}", max_records=self.options.max_batch),
        )
        self._epoch = 0
        """Revocations so far: a batch remembers it at its fetch."""
        self._revoked_at: dict[TopicPartition, int] = {}
        """The epoch each partition was last revoked in."""
        self._database_url = database_url
        self._stop = asyncio.Event()
        self._retrying = Retrying(self.options.backoff, self.metrics, self._stop)
        self._topics = {topic_for(t, settings.topic_prefix): t for t in handler.event_types}
        self._decoder = RecordDecoder(
            handler.name,
            self._topics,
            events or installed_registry(),
            views=handler.reads_views,
        )
        self._given_connections = connections
        """What lends the batches' connections, when given (a replay's held transaction)."""
        self._connections = connections
        self._sink = dead_letter_sink
        self._pool: asyncpg.Pool | None = None
        self._transaction: BatchTransaction | None = None
        self._in_flight: collections.deque[_InFlight] = collections.deque()
        self._uncommitted: dict[tuple[str, int], Any] = {}
        """The last acknowledged record of each partition whose offset is not committed yet
        (``commit_interval``)."""
        self._commits = asyncio.Lock()
        """One offset commit at a time: the acknowledgements, a revocation and the idle loop
        each may commit, and a commit takes everything pending."""
        self._committed_at = time.monotonic()  # the interval counts from the start
        self._target = self.options.max_batch
        """How many records the next batch gathers at most (see ``EngineOptions.batch_growth``)."""
        self._busy_at = time.monotonic()
        """The last moment the engine had work or was not healthy: a batch settled (after its
        retries through an outage), partitions moved, a server answered again after an
        outage. ``stop_when_idle`` counts from here."""
        self._outage = False
        """The last idle probe found the broker or the database unreachable."""
        self._joined = False
        """The group gave this member its first assignment (a range needs none)."""
        self._created_at = self._moved_at = time.monotonic()
        """When the run started; when partitions last moved or an outage ended (the source is
        asked whether it caught up for JOIN_PATIENCE_SECONDS after it)."""

    async def _revoking(self, partitions: Collection[TopicPartition]) -> None:
        """``partitions`` are about to leave: wait for the running transaction and for every
        batch whose transaction committed to commit its offsets (while this member still owns
        them), then start a new epoch: what was fetched of them before is dropped."""
        self.hook.revoking(partitions)
        async with self.batch_lock:
            await self._acknowledged()
            await self._commit_offsets(now=True)  # while this member still owns them
            self._epoch += 1
            for tp in partitions:
                self._revoked_at[tp] = self._epoch
            # A loss (the group moved on without this member) is a revocation too: until the
            # group assigns the partitions again the source does not count as caught up.
            self._busy_at = self._moved_at = time.monotonic()
            self.hook.revoked(partitions)

    def _assigned(self, partitions: Collection[TopicPartition]) -> None:
        self._busy_at = self._moved_at = time.monotonic()
        self._joined = True
        self.hook.assigned(partitions)

    def _revoked_since(self, epoch: int) -> set[TopicPartition]:
        """The partitions revoked after epoch ``epoch``."""
        return {tp for tp, at in self._revoked_at.items() if at > epoch}

    # -- lifecycle -------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the run loop to finish the current batch, commit, leave the group and return."""
        self._stop.set()

    async def run(self) -> RunSummary:
        """Consume until stopped (SIGTERM/SIGINT, ``stop()``, idle for ``stop_when_idle``, or
        the end of a range)."""
        with (
            structlog.contextvars.bound_contextvars(consumer=self.handler.name),
            stopping_on_signals(self.stop),
        ):
            try:
                await self._start()
                await self._loop()
                await self._settle_all()  # batches in flight commit before the group is left
                await self._commit_offsets(now=True)
                if not self.source.live and self._lender().commits:
                    await self.handler.drain()  # work the range's batches handed over
            finally:
                await self._abandon()
                await self._close()
        return self.summary

    def _session(self) -> dict[str, str]:
        """Settings of the engine's database sessions: a frozen member's transaction is ended
        by the server, a lock wait fails and is retried (both bounded, both configurable)."""
        idle = self.settings.consumer_idle_in_transaction_seconds
        lock = self.settings.consumer_lock_timeout_seconds
        return {
            "idle_in_transaction_session_timeout": str(int(idle * 1000)),
            "lock_timeout": str(int(lock * 1000)),
        }

    async def _start(self) -> None:
        require_codecs()
        if self._database_url is not None:
            database_url, role = self._database_url, self.handler.database_role
            opened = await self._retrying(
                "database",
                lambda: PoolConnections.open(
                    database_url,
                    role=role,
                    min_size=1,
                    max_size=POOL_SIZE,
                    session=self._session(),
                ),
            )
            self._pool = opened.pool
            # given connections (a rebuild's held transaction) lend the batches; the pool
            # still serves everything else (dead letters' fallback, the probe, the hook)
            given = self._given_connections
            self._connections = opened if given is None else given
        elif self._connections is None:
            msg = "a database URL is needed unless connections are given"
            raise ValueError(msg)
        self._transaction = BatchTransaction(self.handler, self._lender(), self._retrying)
        if self._sink is None:
            sender = self.transport.sender(list(self._topics))
            self._sink = KafkaDeadLetters(sender, self._lender().lend, self.metrics)
        await self._retrying("kafka", self._sink.start)
        membership = _Membership(self)
        topics = list(self._topics)
        await self._retrying("kafka", lambda: self.source.start(topics, membership))
        await self.hook.started(self.source, self._pool)
        if self.source.live:
            await self.handler.start()
        log.info("consumer started", topics=sorted(self._topics))

    def _lender(self) -> Connections:
        assert self._connections is not None  # noqa: S101 - given, or opened in _start
        return self._connections

    async def _close(self) -> None:
        # A handler with work of its own in flight (the work executor's paid calls) finishes it
        # first, within its own bound, so a graceful stop does not strand leased items.
        await self.hook.stopped()
        try:
            await self.handler.close()
        except Exception as exc:  # noqa: BLE001 - closing: report, then close the rest
            log.warning("handler close failed", error=str(exc))
        with contextlib.suppress(Exception):  # closing: nothing left to do about it
            await self.source.stop()  # leaves the group
        if self._sink is not None:
            with contextlib.suppress(Exception):
                await self._sink.close()
        if self._pool is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._pool.close(), timeout=5)
        log.info(
            "consumer stopped",
            batches=self.summary.batches,
            **{o.value: n for o, n in self.summary.counts.items()},
        )

    async def _loop(self) -> None:
        source = self.source
        last_record = time.monotonic()
        last_periodic = 0.0
        while not self._stop.is_set():
            if await source.finished():
                self.summary.complete = True
                return
            while self._in_flight and self._in_flight[0].task.done():
                await self._settle()  # count it now; a failure surfaces at once
            if (
                self.source.live
                and time.monotonic() - last_periodic >= self.options.periodic_interval
            ):
                await self._settle_all()  # periodic chores never run beside a batch
                await self._periodic()
                last_periodic = time.monotonic()
            records = await source.fetch(self.options.poll_timeout_ms)
            if not records:
                if await self._idle(last_record):
                    log.info("idle; stopping", idle_seconds=self.options.stop_when_idle)
                    return
                continue
            last_record = time.monotonic()
            records, epoch = await self._gather(records)
            if not records:
                continue
            decoded = await self._decode_batch(records, epoch, cooperative=bool(self._in_flight))
            while not self._join(decoded):
                if len(self._in_flight) < max(1, self.options.in_flight):
                    self._hand_over(decoded)
                    break
                await self._settle()

    def _join(self, decoded: _Decoded) -> bool:
        """Add ``decoded`` to the last batch handed over if its transaction has not started yet
        (it waits for the commit before it) and the two hold at most ``max_batch`` records: one
        transaction, one commit (one flush of the write-ahead log) for both, instead of a
        commit each, one after the other, behind a slow one. Fetches keep each partition's
        order and the joined batch keeps theirs."""
        if not self._in_flight:
            return False
        last = self._in_flight[-1]
        waiting = last.waiting
        records = waiting.records + len(decoded.records)
        if waiting.sealed or last.applied.done() or records > self.options.max_batch:
            return False
        waiting.parts.append(decoded)
        waiting.records = records
        return True

    def _hand_over(self, decoded: _Decoded) -> None:
        """Start a batch's way: its transaction after the last one's, then its acknowledgement."""
        previous = self._in_flight[-1] if self._in_flight else None
        loop = asyncio.get_running_loop()
        applied: asyncio.Future[bool] = loop.create_future()
        turn: asyncio.Future[None] = loop.create_future()
        waiting = _Waiting([decoded], len(decoded.records))
        task = asyncio.create_task(self._finish(waiting, previous, applied, turn))
        self._in_flight.append(_InFlight(applied, task, waiting, turn))

    async def _gather(self, first: Sequence[Any]) -> tuple[list[Any], int]:
        """The batch that starts with the fetch ``first``, and the epoch it belongs to.

        With ``batch_growth`` above 1, what the client already holds is taken at once (fetches
        that do not wait), up to the target; nothing waits for more. A batch that reached its
        target (a backlog: the client held more than it) doubles the target, up to
        ``batch_growth`` x ``max_batch``; one that did not reach ``max_batch`` (caught up:
        freshness first) sets it back to ``max_batch``. Whether the first fetch came back full
        says little: a client returns what its completed fetch responses hold, often less than
        ``max_batch`` with thousands more arriving (on the benchmark's stream 1,700 records a
        fetch on average, so growth keyed on a full fetch never started). Fetches keep each
        partition's order, so the batch does too. Partitions revoked between two
        fetches: the records fetched of them before are dropped, as a batch of the earlier
        epoch would drop them (their owner reads them from the committed offset)."""
        full = self.options.max_batch
        records = list(first)
        epoch = self._epoch
        if self.options.batch_growth <= 1:  # a batch is one fetch
            return records, epoch
        more: Sequence[Any] = first
        while more and len(records) < self._target and not self._stop.is_set():
            more = await self.source.fetch(0)  # what the client already holds, at once
            if self._epoch != epoch:
                gone = self._revoked_since(epoch)
                records = [r for r in records if TopicPartition(r.topic, r.partition) not in gone]
                epoch = self._epoch
            records.extend(more)
        if len(records) >= self._target:
            self._target = min(2 * self._target, full * self.options.batch_growth)
        elif len(records) < full:
            self._target = full
        return records, epoch

    async def _idle(self, last_record: float) -> bool:
        """A fetch came back empty: offsets pending for ``commit_interval`` are committed once
        it has passed. Then: ``stop_when_idle`` has passed with nothing fetched while healthy:
        no batch in flight (one retrying through a database outage is not idle time), none
        settled, no partition moved (before or while the broker and the database were asked),
        no record fetched; and both answer now and did at the previous probe (while either is
        away nothing arrives or nothing could be applied: an outage, not idleness, so the count
        starts again, and again once it is over)."""
        if self._uncommitted:
            await self._commit_offsets()  # nothing arriving: commit what is due by now
        idle = self.options.stop_when_idle
        if idle is None or self._in_flight:
            return False
        if time.monotonic() - max(last_record, self._busy_at) < idle or (
            self.source.live
            and not self._joined
            and time.monotonic() - self._created_at < max(idle, JOIN_PATIENCE_SECONDS)
        ):
            return False  # records lately, or not a member yet: nothing was given to read
        probed_at = time.monotonic()
        probe = asyncio.ensure_future(self._unreachable())
        stopping = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait((probe, stopping), return_when=asyncio.FIRST_COMPLETED)
        finally:  # the run cancelled meanwhile leaves neither behind
            stopping.cancel()
            if not probe.done():
                probe.cancel()
        if not probe.done() or probe.cancelled():
            # Stopped (SIGTERM) while a frozen server let the probe wait: the run ends now, not
            # up to IDLE_PROBE_SECONDS per server later.
            await asyncio.wait((probe,))  # its cancellation has ended it
            return False
        unreachable = probe.result()
        if (
            unreachable is None
            and not self._outage
            and time.monotonic() - self._moved_at < JOIN_PATIENCE_SECONDS
            and not await self._caught_up()
        ):
            # Records left to read since partitions last moved, or partitions lost and not
            # assigned again yet: not idle yet.
            return False
        if unreachable is None and not self._outage:
            # Partitions moved while the probe ran (up to IDLE_PROBE_SECONDS): the count started
            # again then, and the partitions just assigned may hold records unread.
            return self._busy_at < probed_at
        if unreachable is None:
            # Back after an outage: the idle count starts now, not at the last failed probe,
            # so records published once the server is back are read before the run ends; and
            # the source is asked again whether it caught up (partitions lost behind the outage
            # come back only once the member joined again).
            self._moved_at = time.monotonic()
            log.info("idle time counted again: reachable")
        else:
            log.warning("idle time not counted: unreachable", component=unreachable)
        self._outage = unreachable is not None
        self._busy_at = time.monotonic()
        return False

    async def _caught_up(self) -> bool:
        """The source read its partitions to their end (a fault counts as not yet)."""
        try:
            return await asyncio.wait_for(self.source.caught_up(), timeout=IDLE_PROBE_SECONDS)
        except Exception:  # noqa: BLE001 - not known to be caught up: not idle
            return False

    async def _unreachable(self) -> str | None:
        """The component ("kafka", "database") that does not answer within IDLE_PROBE_SECONDS,
        or None when both do."""
        lender = self._lender()

        async def database() -> object:
            async with lender.lend() as conn:
                return await conn.fetchval("SELECT 1")

        probes: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            ("kafka", self.source.probe),
            ("database", database),
        ]
        for component, probe in probes:
            try:
                await asyncio.wait_for(probe(), timeout=IDLE_PROBE_SECONDS)
            except Exception:  # noqa: BLE001 - whatever stops the probe: not answering
                return component
        return None

    async def _settle(self) -> None:
        """Wait for the oldest batch in flight (if any) and count it; its failure propagates."""
        if self._in_flight:
            self.summary.add(await self._in_flight[0].task)
            self._in_flight.popleft()
            self._busy_at = time.monotonic()

    async def _settle_all(self) -> None:
        while self._in_flight:
            await self._settle()

    async def _abandon(self) -> None:
        """The run failed or was cancelled: cancel the batches in flight. A transaction rolls
        back, or it committed and its offsets did not: redelivered, then deduplicated."""
        tasks = [batch.task for batch in self._in_flight]
        self._in_flight = collections.deque()
        for task in reversed(tasks):  # the later ones first: none of them starts applying
            if not task.done():
                task.cancel()
        for task in tasks:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await task

    async def _periodic(self) -> None:
        if self._pool is None:
            return  # the test's own connection: no chores beside it
        try:
            await self.handler.periodic(self._pool)
        except Exception as exc:  # noqa: BLE001 - periodic chores never stop consumption
            component = component_of(exc, Component.DATABASE) if is_transient(exc) else None
            if component is not None:
                OUTAGES.failed(component, exc, what="periodic chores")
            else:
                log.warning("periodic task failed", error=describe(exc))

    # -- one batch -------------------------------------------------------------------------

    async def _decode_batch(
        self, records: Sequence[Any], epoch: int, *, cooperative: bool
    ) -> _Decoded:
        """Decode a fetched batch; ``cooperative``: yield to the loop every DECODE_SLICE
        records (a batch is in flight and its statements must keep moving)."""
        started, cpu = time.perf_counter(), time.thread_time()
        decode_all = self._decoder.decode_all
        if not cooperative or len(records) <= DECODE_SLICE:
            deliveries, dead = decode_all(records)
            return _Decoded(
                records,
                deliveries,
                dead,
                time.perf_counter() - started,
                epoch,
                decode_cpu=time.thread_time() - cpu,
            )
        deliveries, dead = [], []
        busy = spent = 0.0
        for index in range(0, len(records), DECODE_SLICE):
            slice_started, cpu = time.perf_counter(), time.thread_time()
            more, more_dead = decode_all(records[index : index + DECODE_SLICE])
            deliveries.extend(more)
            dead.extend(more_dead)
            spent += time.thread_time() - cpu
            busy += time.perf_counter() - slice_started
            await asyncio.sleep(0)
        return _Decoded(records, deliveries, dead, busy, epoch, decode_cpu=spent)

    async def _finish(
        self,
        waiting: _Waiting,
        previous: _InFlight | None,
        applied: asyncio.Future[bool],
        turn: asyncio.Future[None],
    ) -> BatchReport:
        """Apply a decoded batch (with the batches that joined it meanwhile), then acknowledge
        it (see :class:`_InFlight`).

        Its transaction starts once ``previous``'s committed (``applied`` then tells the next
        batch whether this one's did), under ``batch_lock``: a revocation waits for it, then for
        every batch whose transaction committed to be acknowledged, before it starts a new
        epoch. Its records of partitions revoked since their fetch are dropped. With
        ``early_claim``, once ``previous`` has its turn to apply, this batch's transaction opens
        on a second connection and claims its keys beside it (:meth:`_claim_early`); it is
        finished once ``previous`` committed, or rolled back and the batch applied anew when
        ``previous`` did not commit holding every key it left out, or a revocation took records
        of it meanwhile. Its acknowledgement waits for ``previous``'s and happens only if that
        one succeeded: after a failure, committing this batch's offsets would skip the failed
        batch's records (its own effects, already committed, are deduplicated when they are
        redelivered)."""
        assert self._transaction is not None  # noqa: S101 - created in _start
        staged: _Staged | None = None
        committed = False
        early: tuple[EarlyClaim, int] | None = None
        try:
            if previous is not None:
                early = await self._claim_early(waiting, previous)
                if not await asyncio.shield(previous.applied):
                    raise asyncio.CancelledError
            async with self.batch_lock:
                claimed, early = early, None
                staged = await self._in_turn(waiting, previous, turn, claimed)
            committed = True
        finally:
            if early is not None:
                await self._transaction.abandon(early[0])
            waiting.sealed = True
            if not turn.done():
                turn.set_result(None)
            applied.set_result(committed)
        if previous is not None:
            await asyncio.wait([previous.task])
            if _failed(previous.task):
                raise asyncio.CancelledError
        if staged is None:
            return BatchReport(counts=dict.fromkeys(Outcome, 0), facts={})
        return await self._acknowledge(staged)

    async def _in_turn(
        self,
        waiting: _Waiting,
        previous: _InFlight | None,
        turn: asyncio.Future[None],
        early: tuple[EarlyClaim, int] | None,
    ) -> _Staged | None:
        """The batch's turn to apply, under ``batch_lock`` (see :meth:`_finish`): ``early``, its
        transaction claimed early, is finished or rolled back whatever happens."""
        assert self._transaction is not None  # noqa: S101 - created in _start
        try:
            waiting.sealed = True  # what joined it so far is the batch
            if previous is not None and _failed(previous.task):
                raise asyncio.CancelledError  # its acknowledgement failed meanwhile
            decoded = _merged([self._current(part) for part in waiting.parts])
            if early is not None and (
                len(decoded.records) != early[1]
                or previous is None
                or not previous.waiting.holds_all
            ):
                # A revocation took records of it, or the batch before left a key it counted
                # on unheld: applied anew.
                dropped, early = early[0], None
                await self._transaction.abandon(dropped)
                self.metrics.early_claims["applied_anew"].inc()
            waiting.keys = frozenset(d.idempotency_key for d in decoded.deliveries)
            if not turn.done():
                turn.set_result(None)
            if not decoded.records:
                waiting.holds_all = True
                return None
            claimed, early = (early[0] if early else None), None
            staged = await self._apply(decoded, claimed)
            if claimed is not None:
                kept = staged.applied is not None and staged.applied.claimed_early
                self.metrics.early_claims["kept" if kept else "applied_anew"].inc()
            waiting.holds_all = staged.applied is None or staged.applied.holds_all
            return staged
        finally:
            if early is not None:
                await self._transaction.abandon(early[0])

    async def _claim_early(
        self, waiting: _Waiting, previous: _InFlight
    ) -> tuple[EarlyClaim, int] | None:
        """With ``early_claim``: once ``previous`` has its turn to apply and while it has not
        committed, if this batch holds at least half of ``max_batch`` records (a backlog), seal
        it and claim its keys, less ``previous``'s, on a connection of its own
        (:meth:`BatchTransaction.claim_early`): the claim and ``previous``'s handler and commit
        then run in PostgreSQL at once. A smaller batch (the consumer keeps up) is left to
        join the fetches behind it until ``previous`` commits: one transaction and one commit
        for them all, where a claim of its own would seal it. The claim, and the number of
        records it covers (a revocation that takes some before the batch's turn makes it
        applied anew)."""
        assert self._transaction is not None  # noqa: S101 - created in _start
        if not self.options.early_claim:
            return None
        await asyncio.shield(previous.turn)
        keys = previous.waiting.keys
        if keys is None or previous.applied.done():
            return None  # it ended, or committed already: nothing to run beside
        if 2 * waiting.records < self.options.max_batch:
            return None  # keeping up: it joins the fetches behind it, one commit for all
        waiting.sealed = True
        decoded = _merged([self._current(part) for part in waiting.parts])
        if not decoded.deliveries:
            return None
        early = await self._transaction.claim_early(decoded.deliveries, keys)
        return None if early is None else (early, len(decoded.records))

    def _current(self, decoded: _Decoded) -> _Decoded:
        """``decoded`` less its records of partitions revoked since their fetch: their owner now
        (maybe this member again) reads them from the committed offset."""
        if decoded.epoch == self._epoch:
            return decoded
        kept = decoded.without(self._revoked_since(decoded.epoch))
        if dropped := len(decoded.records) - len(kept.records):
            log.info("dropping records fetched before a rebalance", records=dropped)
        return kept

    async def _acknowledged(self) -> None:
        """Wait until every batch whose transaction committed has been acknowledged (called by a
        revocation under ``batch_lock``, so no transaction is running; the batches that did not
        start theirs are dropped in the new epoch)."""
        pending = [batch.task for batch in self._in_flight if batch.applied.done()]
        if pending:
            await asyncio.wait(pending)

    async def _apply(self, decoded: _Decoded, early: EarlyClaim | None = None) -> _Staged:
        """The batch's transaction (dedup + the handler's effect), committed — finishing the
        transaction ``early`` opened for it when it was claimed early."""
        assert self._transaction is not None  # noqa: S101 - created in _start
        started = time.perf_counter()
        records, deliveries = decoded.records, decoded.deliveries
        self.metrics.consumed.inc(len(records))
        staged = _Staged(
            records,
            list(decoded.dead),
            dict.fromkeys(Outcome, 0),
            fetches=decoded.fetches,
            decode_cpu=decoded.decode_cpu,
        )
        if deliveries:
            if early is not None:
                applied = await self._transaction.apply_claimed(early)
            else:
                applied = await self._transaction.apply(deliveries)
            if self.source.live and self._lender().commits:
                self._observe_freshness(deliveries)
            result = applied.result
            staged.applied = applied
            staged.dead.extend(applied.failed)
            staged.counts[Outcome.DEDUPLICATED] = applied.duplicates
            staged.counts[Outcome.STALE] = len(result.stale)
            staged.counts[Outcome.APPLIED] = (
                applied.fresh - len(result.stale) - len(result.rejected)
            )
            staged.facts = dict(result.facts)
        staged.counts[Outcome.DEAD_LETTERED] = len(staged.dead)
        staged.seconds = decoded.seconds + time.perf_counter() - started
        return staged

    async def _acknowledge(self, staged: _Staged) -> BatchReport:
        """After the batch's commit (and every earlier batch's acknowledgement): its dead
        letters (durable before its offsets), its offsets, then ``after_commit``."""
        started = time.perf_counter()
        records, counts, facts = staged.records, staged.counts, staged.facts
        reasons = await self._dead_letter(staged.dead)
        if self.source.live:
            await self._commit_offsets(records)
        applied = staged.applied
        if applied is not None and self._lender().commits:
            result = applied.result
            await self._retrying("database", lambda: self.handler.after_commit(result))
        elapsed = staged.seconds + time.perf_counter() - started
        self.metrics.batch_done(len(records), elapsed, counts)
        log.info(
            "batch",
            records=len(records),
            fetches=staged.fetches,
            claimed_early=applied is not None and applied.claimed_early,
            seconds=round(elapsed, 4),
            decode_cpu=round(staged.decode_cpu, 6),
            **{o.value: n for o, n in counts.items()},
            **facts,
        )
        return BatchReport(counts=counts, facts=facts, dead_letter_reasons=reasons)

    async def _commit_offsets(self, records: Sequence[Any] = (), *, now: bool = False) -> None:
        """Commit the offsets past ``records`` (a batch just acknowledged) — at once without a
        ``commit_interval``; with one, together with those still pending, once the interval
        has passed since the last commit (``now``: whatever is pending, at once)."""
        interval = self.options.commit_interval
        if interval <= 0 and records:
            committed = await self._retrying("kafka", lambda: self.source.commit(records))
            if committed:
                self.hook.committed(committed)
            return
        # Records keep each partition's order: the last one of a partition is its newest.
        self._uncommitted.update({(r.topic, r.partition): r for r in records})
        if not self._uncommitted or (not now and time.monotonic() - self._committed_at < interval):
            return
        async with self._commits:
            pending = list(self._uncommitted.values())
            self._uncommitted.clear()
            if not pending:
                return
            self._committed_at = time.monotonic()
            committed = await self._retrying("kafka", lambda: self.source.commit(pending))
        if committed:
            self.hook.committed(committed)

    def _observe_freshness(self, deliveries: Sequence[Delivery]) -> None:
        """The batch committed: each delivery's age since its outbox row became publishable
        (records the outbox relay published carry the time; others are not measured)."""
        now = time.time()
        ages = [now - ready for d in deliveries if (ready := ready_at(d.headers)) is not None]
        if ages:
            self.metrics.freshness.observe_many(age if age > 0 else 0.0 for age in ages)

    async def _dead_letter(self, dead: list[DeadLetter]) -> dict[str, int]:
        """Hand the batch's dead letters to the sink (durable before offsets commit)."""
        if not dead:
            return {}
        sink = self._sink
        assert sink is not None  # noqa: S101 - created in _start
        # Dead letters keep their source order (per partition), whatever step refused them.
        dead.sort(key=lambda d: (d.source_topic, d.source_partition, d.source_offset))
        await self._retrying("kafka", lambda: sink.put(dead))
        reasons: Counter[str] = Counter()
        # A sink that only notes them (a dry run, a rebuild's report) dead-letters nothing: the
        # record is told of, not as a warning.
        produced = getattr(sink, "produces", True)
        say = log.warning if produced else log.info
        for letter in dead:
            reasons[letter.reason] += 1
            self.metrics.dead_lettered(letter.reason)
            say(
                "dead letter" if produced else "would dead-letter (not produced)",
                reason=letter.reason,
                detail=letter.detail[:300],
                topic=letter.source_topic,
                partition=letter.source_partition,
                offset=letter.source_offset,
            )
        return dict(reasons)
