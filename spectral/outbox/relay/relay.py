"""The outbox relay: publishes core.outbox rows to Kafka, at least once, in per-key order.

One relay session = one PostgreSQL session (which holds the shard locks, see shards.py) and one
idempotent Kafka producer (``enable_idempotence=True``, ``acks=all``). A batch is: fetch the next
publishable rows of the held shards in id order; send them all (topic = topic_prefix +
event_type, key = record_key, headers event_type and idempotency_key); wait for every ack; mark
the acknowledged rows published. A crash (SIGKILL; the database's too: marks do not wait for the
WAL flush) before the mark is durable leaves the rows unmarked, published again by whichever relay
holds the shard next: a duplicate consumers deduplicate by idempotency_key, never a loss. A row is
marked only when it and every earlier row of its key in the batch were acknowledged, so a failed
send never lets a later row of its key be recorded as done before it. Two batches overlap (_loop).

Idle: a relay that found nothing to publish sleeps on the outbox's doorbell (PostgreSQL
LISTEN/NOTIFY, migration ``outbox_wakeup``): it takes its doorbell slot — waiting, at most the
poll interval, for the writers between their outbox insert and their commit — reads once more,
and sleeps until a writer rings or the poll interval runs out (the fallback: a lost notification
delays a row by at most that). Woken, it gives its slot back first, so writers stop ringing
while it works. Each record carries the header ``outbox.ready_at`` (when its row became
publishable, RFC 3339, the database's clock): consumers measure end-to-end freshness from it.

A record Kafka refuses for good (too large for its topic, a topic the relay may not write: no
outage, ``spectral.faults.refusal_of``) keeps the session going: its key is left out and tried
again after a capped backoff, its first row alone, so nothing behind it is skipped (``HeldBack``;
docs/howto/deploy/health-and-alerts.md says how it shows).

Faults (database or broker unavailable) end the session — its locks are released with it — and
the relay starts a new one after a capped exponential backoff, which starts over once a session
has published a batch or caught up: a supervised loop (``spectral.service``), so an outage is
logged when it starts, now and then while it lasts, and when it ends, never once per session
tried. SIGTERM/SIGINT finish the batches in flight (publish and mark), release the locks, exit.

Nothing the relay reports waits on a call that may block. Readiness: the ``database`` and
``kafka`` checks are probes on clocks of their own (a ``SELECT 1`` on a connection of its own; a
metadata request on a Kafka client of its own), and a publish or a statement of the session
still unanswered after ``SPECTRAL_NOT_READY_AFTER_SECONDS`` fails its check (health.py,
``Health.call``) — the idempotent producer retries a publish for as long as the broker is away.
The backlog gauges (``spectral_outbox_depth``, ``spectral_outbox_oldest_age_seconds``) are read
every ``stats_interval`` on a connection of their own, so they rise during a broker outage
whatever the session is waiting for; a slow reading (a large backlog) delays the next one
(``GAUGE_SHARE``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import zip_longest

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from contracts import MAX_PRODUCE_BYTES, format_utc
from spectral.db.connect import ping
from spectral.errors import TransientError
from spectral.faults import Component, Refusal, describe, refusal_of
from spectral.kafka.config import producer_kwargs
from spectral.kafka.freshness import READY_AT_HEADER
from spectral.kafka.probe import KafkaProbe
from spectral.kafka.topics import topic_for
from spectral.lifecycle import stopping_on_signals
from spectral.observability.health import Health
from spectral.observability.logging import get_logger
from spectral.observability.outages import REMIND_EVERY
from spectral.outbox.relay.metrics import RelayMetrics, Wakeup
from spectral.outbox.relay.publish import (
    BatchPublisher,
    KeyPartitioner,
    Outcome,
    Outgoing,
    Publisher,
    RecordPublisher,
)
from spectral.outbox.relay.repository import (
    RELAY_ROLE,
    OutboxRow,
    OutboxStatsReader,
    RelayRepository,
)
from spectral.outbox.relay.shards import SHARD_COUNT, doorbell_slot, plan
from spectral.retry import Backoff
from spectral.service import Supervised
from spectral.settings import KafkaTransport, Settings

log = get_logger(__name__)

CRASH_EXIT_CODE = 137


def safe_to_mark(
    rows: Sequence[OutboxRow], results: Sequence[object]
) -> tuple[list[int], BaseException | None]:
    """The ids of a batch that may be marked published, and the first fault.

    ``results`` holds the send outcome of the first ``len(results)`` rows (RecordMetadata or an
    exception); later rows were never sent. A row is safe when it was acknowledged and every
    earlier row of its key in the batch was too — so a key's marks never skip a row that may
    be missing from the topic.
    """
    acked: list[int] = []
    blocked: set[str] = set()
    fault: BaseException | None = None
    for row, result in zip_longest(rows, results):
        if result is None or isinstance(result, BaseException):
            if fault is None and isinstance(result, BaseException):
                fault = result
            blocked.add(row.record_key)
        elif row.record_key not in blocked:
            acked.append(row.id)
    return acked, fault


def unsettled(rows: Sequence[OutboxRow], marked: set[int]) -> dict[str, int]:
    """Per key of ``rows``, the lowest id of its rows left unmarked (refused, failed, not sent):
    a later row of that key must not be sent before that row is — the next batch, read while
    this one was in flight, holds such rows back (they are read again once it has gone)."""
    first: dict[str, int] = {}
    for row in rows:
        if row.id not in marked and row.record_key not in first:
            first[row.record_key] = row.id
    return first


def _delays(rows: Sequence[OutboxRow], acked_at: float) -> list[float]:
    """Each row's delay from its ready_at to ``acked_at`` (UNIX time); the rows of a writer
    statement share their ready_at, so its delay is computed once per run of them."""
    delays: list[float] = []
    append = delays.append
    moment, delay = None, 0.0
    for row in rows:
        if row.ready_at is not None:
            if row.ready_at != moment:
                moment, delay = row.ready_at, max(0.0, acked_at - row.ready_at.timestamp())
            append(delay)
    return delays


class _Records:
    """A batch's rows as Kafka records: topic ``prefix`` + event_type, key record_key, value
    the envelope, headers event_type, idempotency_key and outbox.ready_at. Each event type's
    topic and header are made once, and a ready_at's text is reused by the rows after it that
    share it (the rows of one writer statement share their ``created_at``)."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._types: dict[str, tuple[str, tuple[str, bytes]]] = {}
        self._moment: datetime | None = None
        self._stamp: tuple[str, bytes] = (READY_AT_HEADER, b"")

    def __call__(self, rows: Sequence[OutboxRow]) -> list[Outgoing]:
        types = self._types
        records: list[Outgoing] = []
        append = records.append
        for row in rows:
            kind = types.get(row.event_type)
            if kind is None:
                kind = types[row.event_type] = (
                    topic_for(row.event_type, self._prefix),
                    ("event_type", row.event_type.encode()),
                )
            headers = [kind[1], ("idempotency_key", row.idempotency_key.encode())]
            moment = row.ready_at
            if moment is not None:
                if moment != self._moment:
                    self._moment = moment
                    self._stamp = (READY_AT_HEADER, format_utc(moment).encode())
                headers.append(self._stamp)
            append((kind[0], row.record_key.encode(), row.envelope, headers))
        return records


@dataclass
class _Idle:
    """The doorbell slot an idle relay holds while it sleeps."""

    slot: int | None = None

    async def disarm(self, repo: RelayRepository) -> None:
        if self.slot is not None:
            slot, self.slot = self.slot, None
            await repo.release_doorbell(slot)


@dataclass
class HeldBack:
    """Keys whose first unpublished row Kafka refused for good, each with its refusals in a row
    and the time of its next try: until then the batches leave the key out."""

    backoff: Backoff
    clock: Callable[[], float] = time.monotonic
    keys: dict[str, tuple[int, float]] = field(default_factory=dict)

    def refused(self, key: str) -> float:
        """Hold ``key`` back once more; the seconds until its next try."""
        refusals = self.keys.get(key, (0, 0.0))[0] + 1
        delay = self.backoff.delay(refusals)
        self.keys[key] = (refusals, self.clock() + delay)
        return delay

    def published(self, key: str) -> bool:
        """``key``'s row went out: release it; whether it was held back."""
        return self.keys.pop(key, None) is not None

    def on_trial(self, rows: Sequence[OutboxRow]) -> set[int]:
        """The rows of ``rows`` to hold back from the send: those behind the first row of a key
        being tried again (sent only once it is taken, so a refused row's followers do not
        reach their topics again at every try)."""
        seen: set[str] = set()
        hold: set[int] = set()
        for row in rows:
            if row.record_key in self.keys:
                if row.record_key in seen:
                    hold.add(row.id)
                seen.add(row.record_key)
        return hold

    def waiting(self) -> list[str]:
        """The keys to leave out of the next batch (their next try still ahead). Keys long past
        their try (published by another relay meanwhile) are forgotten."""
        now = self.clock()
        for key in [k for k, (_, at) in self.keys.items() if at < now - FORGET_AFTER]:
            del self.keys[key]
        return sorted(k for k, (_, at) in self.keys.items() if at > now)


FORGET_AFTER = 600.0
"""Seconds past its try after which a held-back key nobody refused again is forgotten."""


@dataclass
class _Flight:
    """A batch sent to Kafka, its acknowledgements awaited (the next batch is read meanwhile)."""

    rows: Sequence[OutboxRow]
    sent: list[Outcome]
    """Each row's send (a batch's future is shared by its rows)."""
    failure: BaseException | None
    """The fault that stopped the sending (the rows after it were not sent)."""
    started: float
    answered_at: float = 0.0
    """When the last acknowledgement (or fault) came back (this host's clock, UNIX time)."""
    _acks: list[asyncio.Future[object]] = field(default_factory=list)
    _outcomes: asyncio.Future[list[object]] | None = None
    _every_row_sent: bool = False

    def __post_init__(self) -> None:
        acks = [f for f in self.sent if isinstance(f, asyncio.Future)]
        self._every_row_sent = self.failure is None and len(acks) == len(self.sent)
        self._acks = list(dict.fromkeys(acks))
        self._outcomes = asyncio.gather(*self._acks, return_exceptions=True)
        self._outcomes.add_done_callback(self._answered)

    def _answered(self, _: object) -> None:
        self.answered_at = time.time()

    async def acknowledged(self) -> bool:
        """Wait for the answers; whether every row was sent and acknowledged (the usual case,
        in which no row's outcome needs a look)."""
        assert self._outcomes is not None  # noqa: S101 - set at creation
        outcomes = await self._outcomes
        return self._every_row_sent and not any(isinstance(o, BaseException) for o in outcomes)

    async def results(self) -> list[object]:
        """Each row's outcome in order: its acknowledgement, its fault, or None (not sent)."""
        assert self._outcomes is not None  # noqa: S101 - set at creation
        outcome = dict(zip(self._acks, await self._outcomes, strict=True))
        return [outcome[f] if isinstance(f, asyncio.Future) else f for f in self.sent]


@dataclass
class _Landed:
    """A batch whose acknowledgements came back, its rows to mark published not yet marked."""

    rows: list[OutboxRow]
    """The rows acknowledged, each after every earlier row of its key in the batch."""
    flight: _Flight
    acked_at: float
    """When the last acknowledgement came back (UNIX time)."""


class BrokerUnavailableError(TransientError):
    """Kafka did not acknowledge (part of) a batch."""

    component = Component.KAFKA


@dataclass(frozen=True)
class RelayOptions:
    batch: int = 500
    poll_interval: float = 0.2
    once: bool = False
    rebalance_interval: float = 1.0
    listen: bool = True
    """Sleep on the doorbell (LISTEN/NOTIFY) when idle; False: poll only."""
    stats_interval: float = 1.0
    batch_growth: int = 4
    """How far a backlog grows a batch: after a full fetch the next one asks for twice as
    many rows, up to ``batch_growth`` x ``batch``; a short fetch brings it back to ``batch``."""
    linger_ms: int = 0
    """The producer's wait for more records before it sends a request. A batch sends every row
    at once and then waits for every ack, so no more records come: any linger only delays the
    whole batch (5 ms did, at every batch)."""
    max_batch_bytes: int = 512 * 1024
    backoff: Backoff = field(default_factory=lambda: Backoff(base=0.5, cap=10.0))
    refusal_backoff: Backoff = field(default_factory=lambda: Backoff(base=1.0, cap=60.0))
    """Between tries of a key whose row Kafka refused for good."""
    # Test-only fault hook: exit abruptly right after Kafka acknowledged the first batch and
    # before it is marked published (what a SIGKILL at the worst moment leaves behind).
    crash_after_publish: bool = False


@dataclass
class RelayReport:
    published: int = 0
    batches: int = 0
    sessions: int = 0
    refused: int = 0
    """Sends Kafka refused for good (each try of a refused row counts)."""


class OutboxRelay:
    def __init__(
        self,
        settings: Settings,
        *,
        kafka_bootstrap: str,
        database_url: str,
        metrics: RelayMetrics,
        options: RelayOptions | None = None,
        role: str | None = RELAY_ROLE,
        health: Health | None = None,
    ) -> None:
        self._settings = settings
        self._health = health
        self._bootstrap = kafka_bootstrap
        self._database_url = database_url
        self._role = role
        self.metrics = metrics
        self.options = options or RelayOptions()
        self._bell = asyncio.Event()
        """Set by the doorbell's notifications, and by ``stop``."""
        self._offset = random.randrange(SHARD_COUNT)  # noqa: S311 - spreads first picks, not security
        self._report = RelayReport()
        self._held_back = HeldBack(self.options.refusal_backoff)
        self._records = _Records(settings.topic_prefix)
        self._refusal_lines: dict[Refusal, tuple[float, int]] = {}
        self._sessions = Supervised(
            "outbox-relay",
            self._session_step,
            backoff=self.options.backoff,
            component=Component.DATABASE,
            give_up_after=ONCE_GIVES_UP_AFTER if self.options.once else None,
            on_fault=self._faulted,
        )

    def stop(self) -> None:
        """Finish the batch in flight, then exit (safe from a signal handler)."""
        self._sessions.stop_soon()
        self._bell.set()

    @property
    def _stopping(self) -> bool:
        return self._sessions.stopping

    async def run(self) -> RelayReport:
        """Run sessions until stopped (or, ``once``, until nothing is publishable)."""
        self._report = report = RelayReport()
        watch = self._watch()
        try:
            with stopping_on_signals(self.stop):
                await self._sessions.run()
        finally:
            await watch.aclose()
        return report

    def _watch(self) -> _Watch:
        """The probes and the backlog gauges of a long-running relay, on clocks of their own."""
        if self.options.once:
            return _Watch()
        kafka = KafkaProbe(self._settings, self._bootstrap, client_id="spectral-outbox-probe")
        gauges = _Gauges(self._database_url, self._role, self.metrics)
        if self._health is not None:
            self._health.probe(Component.DATABASE, lambda: ping(self._database_url))
            self._health.probe(Component.KAFKA, kafka)
        every = self.options.stats_interval

        async def read_gauges() -> float:
            return gauge_pause(every, await gauges.refresh())

        refresh = Supervised(
            "outbox-gauges",
            read_gauges,
            backoff=Backoff(base=every, cap=10.0),
            component=Component.DATABASE,
            retries_any_failure=True,
        )
        refresh.start()
        return _Watch(refresh, kafka, gauges)

    def _faulted(self, exc: BaseException, component: str | None) -> None:
        self.metrics.errors[
            Component.KAFKA if component == Component.KAFKA else Component.DATABASE
        ].inc()
        self._ready("session", ok=False, detail=f"backing off: {describe(exc)}")

    async def _session_step(self) -> None:
        """One session; it ends when the relay is asked to stop (or, ``once``, has published
        everything): the relay is done. A fault ends it by raising."""
        await self._session(self._report)

    async def _session(self, report: RelayReport) -> None:
        repo = await RelayRepository.open(self._database_url, role=self._role)
        producer: Publisher | None = None
        held: set[int] = set()
        try:
            producer = await self._start_producer()
            report.sessions += 1
            log.info("relay session started", once=self.options.once)
            self._ready("session", ok=True, detail="database and Kafka connected")
            if self.options.listen and not self.options.once:
                await repo.listen(self._bell.set)
            await self._loop(repo, producer, held, report)
        finally:
            self._ready("shards", ok=False, detail="no session")
            self.metrics.shards_held.set(0)
            if producer is not None:
                with contextlib.suppress(Exception):
                    await producer.stop()
            await repo.close()  # ends the session: its shard locks are released
        # Ended cleanly (stopped, or a run with --once done): no readiness to report any more.
        if self._health is not None:
            for check in ("session", "shards"):
                self._health.forget(check)

    async def _loop(
        self, repo: RelayRepository, producer: Publisher, held: set[int], report: RelayReport
    ) -> None:
        """Batches, two at a time: while one batch's acknowledgements are awaited the next one
        is read; it is sent once the first one's outcome is known (so a key's rows never
        overtake a row of it that was not acknowledged), and the first one is marked while the
        second one's acknowledgements are awaited, by the statement that reads the third one
        (one round trip for both)."""
        next_rebalance = 0.0
        idle = _Idle()
        limit = self.options.batch
        flight: _Flight | None = None
        landed: _Landed | None = None
        while not self._stopping:
            now = time.monotonic()
            if now >= next_rebalance:
                await self._rebalance_landed(
                    repo, producer, held, report, flight=flight, landed=landed
                )
                flight = landed = None
                next_rebalance = now + self.options.rebalance_interval
            started = time.perf_counter()
            rows = await self._fetch(repo, held, limit, flight, landed)
            if landed is not None:
                self._marked(landed, report)
                landed = None
            limit = self._next_limit(limit, len(rows))
            if flight is not None:
                flight, landed = await self._land(
                    repo, producer, flight, following=rows, report=report, started=started
                )
            elif rows:
                flight = await self._send(producer, rows, {}, started)
            if flight is not None or landed is not None:  # (a landed batch: read once more)
                await idle.disarm(repo)  # at work: writers stop ringing
                continue
            self._sessions.progressed()  # caught up: the faults before are over
            if self.options.once:
                await self._refresh_stats(repo)
                return
            if not await self._idle(repo, idle, held):
                next_rebalance = 0.0  # slept it out: look for shards freed meanwhile
        await self._stopped(repo, producer, flight, landed, report)

    async def _settle(
        self,
        repo: RelayRepository,
        producer: Publisher,
        flight: _Flight | None,
        landed: _Landed | None,
        report: RelayReport,
    ) -> None:
        """Mark the landed batch, then land and mark the batch in flight (in that order: a
        key's rows are marked in id order)."""
        if landed is not None:
            await self._mark(repo, landed, report)
        if flight is not None:
            _, last = await self._land(repo, producer, flight, report=report)
            await self._mark(repo, last, report)

    async def _rebalance_landed(
        self,
        repo: RelayRepository,
        producer: Publisher,
        held: set[int],
        report: RelayReport,
        *,
        flight: _Flight | None,
        landed: _Landed | None,
    ) -> None:
        """Land and mark the batches (shards change hands only between marked batches), then
        rebalance the shards."""
        await self._settle(repo, producer, flight, landed, report)
        with self._call(Component.DATABASE, "shard rebalance"):
            await self._rebalance(repo, held)

    async def _stopped(
        self,
        repo: RelayRepository,
        producer: Publisher,
        flight: _Flight | None,
        landed: _Landed | None,
        report: RelayReport,
    ) -> None:
        """Asked to stop: finish the batches (publish and mark)."""
        await self._settle(repo, producer, flight, landed, report)
        if self.options.once:
            await self._refresh_stats(repo)  # (the session's end gives a held doorbell slot back)

    async def _fetch(
        self,
        repo: RelayRepository,
        held: set[int],
        limit: int,
        flight: _Flight | None,
        landed: _Landed | None,
    ) -> list[OutboxRow]:
        """The next batch: rows of the held shards, none of the keys waiting for their next try
        nor of the batch in flight; the ``landed`` batch is marked by the same statement."""
        with self._call(Component.DATABASE, "fetch a batch"):
            return await repo.fetch_batch(
                sorted(held),
                limit,
                leave_out=self._held_back.waiting(),
                in_flight=[row.id for row in flight.rows] if flight else (),
                mark=landed.rows if landed else (),
            )

    def _next_limit(self, limit: int, fetched: int) -> int:
        """A full fetch (a backlog) doubles the next batch, up to ``batch_growth`` times the
        batch; a short one (caught up) brings it back."""
        if fetched < limit:
            return self.options.batch
        return min(2 * limit, self.options.batch * max(1, self.options.batch_growth))

    async def _idle(self, repo: RelayRepository, idle: _Idle, held: set[int]) -> bool:
        """Nothing to publish: sleep until the doorbell rings or the wait runs out; return
        whether it rang (or the relay was asked to stop)."""
        slot = doorbell_slot(held)
        if not self.options.listen or slot is None:  # polling only, or nothing to publish
            await self._sleep(self.options.poll_interval)
            return self._stopping
        if idle.slot is None:
            self._bell.clear()  # a ring from now on ends the next wait at once
            if await repo.await_doorbell(slot, self.options.poll_interval):
                idle.slot = slot
                return True  # read once more: writers that committed before the arm did not ring
            self.metrics.wakeups[Wakeup.POLL].inc()  # a writer held its transaction open
            return False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._bell.wait(), timeout=self.options.poll_interval)
        rang = self._bell.is_set()
        if not self._stopping:
            self.metrics.wakeups[Wakeup.NOTIFY if rang else Wakeup.POLL].inc()
        await idle.disarm(repo)
        return rang

    async def _send(
        self,
        producer: Publisher,
        rows: Sequence[OutboxRow],
        behind: dict[str, int],
        started: float,
    ) -> _Flight:
        """Send ``rows`` but those held back: rows of a key on trial behind its first row, and
        rows behind an unmarked row of their key in the batch before (``behind``)."""
        hold = self._held_back.on_trial(rows)
        if behind:
            hold.update(r.id for r in rows if behind.get(r.record_key, r.id) < r.id)
        with self._call(Component.KAFKA, "publish"):
            sent, failure = await self._publish(producer, rows, hold)
        return _Flight(rows, sent, failure, started)

    async def _land(
        self,
        repo: RelayRepository,
        producer: Publisher,
        flight: _Flight,
        *,
        report: RelayReport,
        following: Sequence[OutboxRow] = (),
        started: float = 0.0,
    ) -> tuple[_Flight | None, _Landed]:
        """Wait for ``flight``'s acknowledgements; send the ``following`` batch (read
        meanwhile) unless Kafka is away. Returns the following batch in flight and ``flight``
        landed: its rows to mark (the next fetch marks them, or ``_mark``). Kafka away: the
        acknowledged rows are marked at once and the fault raised."""
        with self._call(Component.KAFKA, "publish"):
            whole = await flight.acknowledged()
            results = None if whole else await flight.results()
        if self.options.crash_after_publish:
            sys.stderr.write("relay: crash hook: exiting after publish, before mark\n")
            sys.stderr.flush()
            os._exit(CRASH_EXIT_CODE)
        acked_at = flight.answered_at or time.time()
        outage: BaseException | None = None
        behind: dict[str, int] = {}
        if results is None:  # every row acknowledged: every row is safe to mark
            acked_rows = list(flight.rows)
            self._settle_refusals(flight.rows, (), None, report)
        else:
            acked, _ = safe_to_mark(flight.rows, results)
            outage = flight.failure or next(
                (r for r in results if isinstance(r, BaseException) and refusal_of(r) is None),
                None,
            )
            marked = set(acked)
            self._settle_refusals(flight.rows, results, marked, report)
            behind = unsettled(flight.rows, marked)
            acked_rows = [row for row in flight.rows if row.id in marked]
        nxt: _Flight | None = None
        if following and outage is None:
            nxt = await self._send(producer, following, behind, started)
        landed = _Landed(acked_rows, flight, acked_at)
        if outage is not None:
            await self._mark(repo, landed, report, progressed=False)
            raise BrokerUnavailableError(f"Kafka did not acknowledge a batch: {outage}") from outage
        return nxt, landed

    async def _mark(
        self,
        repo: RelayRepository,
        landed: _Landed,
        report: RelayReport,
        *,
        progressed: bool = True,
    ) -> None:
        """Mark a landed batch's rows published, in a statement of its own."""
        with self._call(Component.DATABASE, "mark published"):
            await repo.mark_published(landed.rows)
        self._marked(landed, report, progressed=progressed)

    def _marked(self, landed: _Landed, report: RelayReport, *, progressed: bool = True) -> None:
        """A landed batch's rows were marked published."""
        self.metrics.published.inc(len(landed.rows))
        self.metrics.batch_duration.observe(time.perf_counter() - landed.flight.started)
        self.metrics.publish_delay.observe_many(_delays(landed.rows, landed.acked_at))
        report.published += len(landed.rows)
        report.batches += 1
        if progressed:
            self._sessions.progressed()  # published and marked: the next fault backs off anew

    def _settle_refusals(
        self,
        rows: Sequence[OutboxRow],
        results: Sequence[object],
        marked: set[int] | None,
        report: RelayReport,
    ) -> None:
        """Hold back the keys of the rows Kafka refused for good; release the keys whose row
        went out at last. ``marked`` None: every row was acknowledged (``results`` unused)."""
        if marked is None:
            if self._held_back.keys:
                for row in rows:
                    self._released(row)
            self.metrics.keys_held_back.set(len(self._held_back.waiting()))
            return
        for row, result in zip(rows, results, strict=False):
            refusal = refusal_of(result) if isinstance(result, BaseException) else None
            if refusal is not None and isinstance(result, BaseException):
                report.refused += 1
                self.metrics.refused[refusal].inc()
                retry_in = self._held_back.refused(row.record_key)
                self._log_refusal(row, result, refusal, retry_in)
            elif row.id in marked:
                self._released(row)
        self.metrics.keys_held_back.set(len(self._held_back.waiting()))

    def _released(self, row: OutboxRow) -> None:
        """``row`` went out: its key, if it was held back, is released."""
        if self._held_back.published(row.record_key):
            log.info(
                "refused record published at last", outbox_id=row.id, event_type=row.event_type
            )

    def _log_refusal(
        self, row: OutboxRow, exc: BaseException, refusal: Refusal, retry_in: float
    ) -> None:
        """The first refusal of a kind, then at most one line a minute with a count."""
        now = time.monotonic()
        logged_at, unlogged = self._refusal_lines.get(refusal, (None, 0))
        if logged_at is not None and now - logged_at < REMIND_EVERY:
            self._refusal_lines[refusal] = (logged_at, unlogged + 1)
            return
        self._refusal_lines[refusal] = (now, 0)
        log.error(
            "Kafka refused a record; its key waits",
            outbox_id=row.id,
            event_type=row.event_type,
            topic=topic_for(row.event_type, self._settings.topic_prefix),
            reason=refusal.value,
            error=describe(exc),
            refusals_since_last_line=unlogged + 1,
            retry_in=round(retry_in, 1),
        )

    async def _rebalance(self, repo: RelayRepository, held: set[int]) -> None:
        members = await repo.count_relays()
        step = plan(frozenset(held), members, self._offset)
        if step.release:
            await repo.unlock(step.release)
            held.difference_update(step.release)
            log.info("released shards", shards=list(step.release), members=members)
        won = await repo.try_lock(step.candidates, step.want)
        if won:
            held.update(won)
            log.info("acquired shards", shards=sorted(won), members=members, held=len(held))
        self.metrics.shards_held.set(len(held))
        if held:
            self._ready("shards", ok=True, detail=f"{len(held)} of {SHARD_COUNT} held")
            return
        # More relays than shards: one that holds none while the others hold every shard is
        # a ready standby (it takes shards over when a holder goes away), not a failing one.
        others = await repo.count_held_shards()
        self._ready(
            "shards",
            ok=others == SHARD_COUNT,
            detail=f"standby: all {SHARD_COUNT} shards held by other relays"
            if others == SHARD_COUNT
            else f"0 of {SHARD_COUNT} held; {SHARD_COUNT - others} held by nobody",
        )

    def _ready(self, check: str, *, ok: bool, detail: str) -> None:
        if self._health is not None:
            self._health.set_check(check, ok=ok, detail=detail)

    def _call(self, check: str, what: str) -> contextlib.AbstractContextManager[None]:
        """A call of the session that may block: unanswered past the bound, ``check`` fails."""
        if self._health is None:
            return contextlib.nullcontext()
        return self._health.call(check, what)

    async def _refresh_stats(self, repo: RelayRepository) -> None:
        stats = await repo.stats()
        self.metrics.depth.set(stats.depth)
        self.metrics.oldest_age.set(stats.oldest_age_seconds)

    def _producer(self) -> Publisher:
        """The publisher of the settings' transport (``SPECTRAL_KAFKA_TRANSPORT``)."""
        client_id = "spectral-outbox-relay"
        if self._settings.kafka_transport is KafkaTransport.CONFLUENT:
            from spectral.kafka.confluent import ConfluentPublisher  # noqa: PLC0415 - librdkafka only when chosen

            return RecordPublisher(
                ConfluentPublisher(
                    self._settings,
                    self._bootstrap,
                    client_id=client_id,
                    linger_ms=self.options.linger_ms,
                    max_batch_bytes=self.options.max_batch_bytes,
                    max_request_bytes=MAX_PRODUCE_BYTES,
                )
            )
        partitioner = KeyPartitioner()
        producer = AIOKafkaProducer(
            **producer_kwargs(self._settings, self._bootstrap),
            client_id=client_id,
            partitioner=partitioner,
            linger_ms=self.options.linger_ms,
            max_batch_size=self.options.max_batch_bytes,
            # the contract's producer limit: aiokafka's default (1 MiB) refuses a valid record
            # whose value is 1 MiB once its key, headers and framing are added
            max_request_size=MAX_PRODUCE_BYTES,
        )
        return BatchPublisher(producer, partitioner, MAX_PRODUCE_BYTES)

    async def _start_producer(self) -> Publisher:
        producer = self._producer()
        try:
            await producer.start()
        except (KafkaError, TransientError) as exc:
            with contextlib.suppress(Exception):
                await producer.stop()
            raise BrokerUnavailableError(f"cannot start the Kafka producer: {exc}") from exc
        return producer

    async def _publish(
        self, producer: Publisher, rows: Sequence[OutboxRow], hold: set[int]
    ) -> tuple[list[Outcome], BaseException | None]:
        """Send every row but those of ``hold``; return each row's send (the future of its
        acknowledgement, its refusal, or None when it was not sent) and the fault that stopped
        the sending, if any. A record the producer refuses for good before sending it (too
        large) is that row's outcome; the other rows are sent."""
        going = [row for row in rows if row.id not in hold] if hold else rows
        outcomes, failure = await producer.publish(self._records(going))
        if not hold:
            return outcomes, failure
        by_id = {row.id: outcome for row, outcome in zip(going, outcomes, strict=True)}
        return [by_id.get(row.id) for row in rows], failure

    async def _sleep(self, seconds: float) -> None:
        await self._sessions.sleep(seconds)


ONCE_GIVES_UP_AFTER = 5
"""Faults in a row after which ``--once`` gives up (a long-running relay never does)."""


class _Gauges:
    """The backlog gauges, read on a connection of their own (not a relay member: it holds no
    lock and is not counted when the relays share the shards out)."""

    def __init__(self, database_url: str, role: str | None, metrics: RelayMetrics) -> None:
        self._url = database_url
        self._role = role
        self._metrics = metrics
        self._reader: OutboxStatsReader | None = None

    async def refresh(self) -> float:
        """Read the gauges; the seconds the reading took."""
        if self._reader is None:
            self._reader = await OutboxStatsReader.open(self._url, role=self._role)
        began = time.monotonic()
        try:
            stats = await self._reader.stats(timeout=STATS_TIMEOUT)
        except BaseException:
            reader, self._reader = self._reader, None
            await reader.close()
            raise
        self._metrics.depth.set(stats.depth)
        self._metrics.oldest_age.set(stats.oldest_age_seconds)
        return time.monotonic() - began

    async def close(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            await reader.close()


STATS_TIMEOUT = 5.0
GAUGE_SHARE = 0.05
"""The largest share of its time the gauges' connection spends reading: after a reading of
``t`` seconds the next one comes at least ``t / GAUGE_SHARE`` seconds later."""


def gauge_pause(every: float, took: float) -> float:
    """Seconds until the next reading of the gauges, after one that took ``took``."""
    return max(every, took / GAUGE_SHARE)


"""Seconds a gauge reading may take before its connection is dropped and opened again."""


@dataclass
class _Watch:
    refresh: Supervised | None = None
    kafka: KafkaProbe | None = None
    gauges: _Gauges | None = None

    async def aclose(self) -> None:
        if self.refresh is not None:
            await self.refresh.stop(cancel=True)
        if self.kafka is not None:
            await self.kafka.close()
        if self.gauges is not None:
            await self.gauges.close()
