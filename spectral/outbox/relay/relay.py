"""The outbox relay: publishes core.outbox rows to Kafka, at least once, in per-key order.

One relay session = one PostgreSQL session (which holds the shard locks, see shards.py) and one
idempotent Kafka producer (``enable_idempotence=True``, ``acks=all``). A batch is: fetch the next
publishable rows of the held shards in id order; send them all (topic = topic_prefix +
event_type, key = record_key, headers event_type and idempotency_key); wait for every ack; mark
the acknowledged rows published. A crash (SIGKILL) anywhere before the mark leaves the rows
unmarked and they are published again by whichever relay holds the shard next: a duplicate on
the topic that consumers deduplicate by idempotency_key, never a loss. A row is marked only when
it and every earlier row of its key in the batch were acknowledged, so a failed send never lets
a later row of the same key be recorded as done before it.

Idle: a relay that found nothing to publish sleeps on the outbox's doorbell (PostgreSQL
LISTEN/NOTIFY, migration ``outbox_wakeup``): it takes its doorbell slot — waiting, at most the
poll interval, for the writers between their outbox insert and their commit — reads once more,
and sleeps until a writer rings or the poll interval runs out (the fallback: a lost notification
delays a row by at most that). Woken, it gives its slot back first, so writers stop ringing
while it works. Each
record carries the header ``outbox.ready_at`` (when its row became publishable, RFC 3339, the
database's clock): consumers measure end-to-end freshness from it.

Faults (database or broker unavailable) end the session — its locks are released with it — and
the relay starts a new one after a capped exponential backoff. SIGTERM/SIGINT finish the batch in
flight (publish and mark), release the locks and exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import zip_longest

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from contracts import MAX_PRODUCE_BYTES, format_utc
from spectral.errors import TransientError
from spectral.kafka.config import producer_kwargs
from spectral.kafka.freshness import READY_AT_HEADER
from spectral.kafka.topics import topic_for
from spectral.lifecycle import stopping_on_signals
from spectral.observability.health import Health
from spectral.observability.logging import get_logger
from spectral.outbox.relay.metrics import Component, RelayMetrics, Wakeup
from spectral.outbox.relay.repository import RELAY_ROLE, OutboxRow, RelayRepository
from spectral.outbox.relay.shards import SHARD_COUNT, doorbell_slot, plan
from spectral.retry import Backoff
from spectral.settings import Settings

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


def _headers(row: OutboxRow) -> list[tuple[str, bytes]]:
    headers = [
        ("event_type", row.event_type.encode()),
        ("idempotency_key", row.idempotency_key.encode()),
    ]
    if row.ready_at is not None:
        headers.append((READY_AT_HEADER, format_utc(row.ready_at).encode()))
    return headers


@dataclass
class _Idle:
    """The doorbell slot an idle relay holds while it sleeps."""

    slot: int | None = None

    async def disarm(self, repo: RelayRepository) -> None:
        if self.slot is not None:
            slot, self.slot = self.slot, None
            await repo.release_doorbell(slot)


class BrokerUnavailableError(TransientError):
    """Kafka did not acknowledge (part of) a batch."""


@dataclass(frozen=True)
class RelayOptions:
    batch: int = 500
    poll_interval: float = 0.2
    once: bool = False
    rebalance_interval: float = 1.0
    listen: bool = True
    """Sleep on the doorbell (LISTEN/NOTIFY) when idle; False: poll only."""
    stats_interval: float = 1.0
    linger_ms: int = 0
    """The producer's wait for more records before it sends a request. A batch sends every row
    at once and then waits for every ack, so no more records come: any linger only delays the
    whole batch (5 ms did, at every batch)."""
    max_batch_bytes: int = 512 * 1024
    backoff: Backoff = field(default_factory=lambda: Backoff(base=0.5, cap=10.0))
    # Test-only fault hook: exit abruptly right after Kafka acknowledged the first batch and
    # before it is marked published (what a SIGKILL at the worst moment leaves behind).
    crash_after_publish: bool = False


@dataclass
class RelayReport:
    published: int = 0
    batches: int = 0
    sessions: int = 0


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
        self._stopping = asyncio.Event()
        self._bell = asyncio.Event()
        """Set by the doorbell's notifications, and by ``stop``."""
        self._offset = random.randrange(SHARD_COUNT)  # noqa: S311 - spreads first picks, not security

    def stop(self) -> None:
        """Finish the batch in flight, then exit (safe from a signal handler)."""
        self._stopping.set()
        self._bell.set()

    async def run(self) -> RelayReport:
        report = RelayReport()
        faults = 0
        with stopping_on_signals(self.stop):
            while not self._stopping.is_set():
                try:
                    await self._session(report)
                except TransientError as exc:
                    faults += 1
                    component = (
                        Component.KAFKA
                        if isinstance(exc, BrokerUnavailableError)
                        else Component.DATABASE
                    )
                    self.metrics.errors[component].inc()
                    delay = self.options.backoff.delay(faults)
                    log.warning("relay session failed; backing off", error=str(exc), retry_in=delay)
                    if self.options.once and faults > 5:  # noqa: PLR2004 - a one-shot run gives up
                        raise
                    await self._sleep(delay)
                    continue
                break
        return report

    async def _session(self, report: RelayReport) -> None:
        repo = await RelayRepository.open(self._database_url, role=self._role)
        producer: AIOKafkaProducer | None = None
        held: set[int] = set()
        try:
            producer = await self._start_producer()
            report.sessions += 1
            log.info("relay session started", once=self.options.once)
            self._ready("session", ok=True, detail="database and Kafka connected")
            await self._loop(repo, producer, held, report)
        finally:
            self._ready("session", ok=False, detail="no session (backing off)")
            self._ready("shards", ok=False, detail="no session")
            self.metrics.shards_held.set(0)
            if producer is not None:
                with contextlib.suppress(Exception):
                    await producer.stop()
            await repo.close()  # ends the session: its shard locks are released

    async def _loop(
        self, repo: RelayRepository, producer: AIOKafkaProducer, held: set[int], report: RelayReport
    ) -> None:
        next_rebalance = 0.0
        next_stats = 0.0
        idle = _Idle()
        if self.options.listen and not self.options.once:
            await repo.listen(self._bell.set)
        while not self._stopping.is_set():
            now = time.monotonic()
            if now >= next_rebalance:
                await self._rebalance(repo, held)
                next_rebalance = now + self.options.rebalance_interval
            if now >= next_stats:
                await self._refresh_stats(repo)
                next_stats = now + self.options.stats_interval
            started = time.perf_counter()
            rows = await repo.fetch_batch(sorted(held), self.options.batch)
            if not rows:
                if self.options.once:
                    await self._refresh_stats(repo)
                    return
                if not await self._idle(repo, idle, held):
                    next_rebalance = 0.0  # slept it out: look for shards freed meanwhile
                continue
            await idle.disarm(repo)
            await self._batch(repo, producer, rows, started, report)
        await self._refresh_stats(repo)  # (the session's end gives a held doorbell slot back)

    async def _idle(self, repo: RelayRepository, idle: _Idle, held: set[int]) -> bool:
        """Nothing to publish: sleep until the doorbell rings or the wait runs out; return
        whether it rang (or the relay was asked to stop)."""
        slot = doorbell_slot(held)
        if not self.options.listen or slot is None:  # polling only, or nothing to publish
            await self._sleep(self.options.poll_interval)
            return self._stopping.is_set()
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
        if not self._stopping.is_set():
            self.metrics.wakeups[Wakeup.NOTIFY if rang else Wakeup.POLL].inc()
        await idle.disarm(repo)
        return rang

    async def _batch(
        self,
        repo: RelayRepository,
        producer: AIOKafkaProducer,
        rows: Sequence[OutboxRow],
        started: float,
        report: RelayReport,
    ) -> None:
        acked, failure = await self._publish(producer, rows)
        if self.options.crash_after_publish:
            sys.stderr.write("relay: crash hook: exiting after publish, before mark\n")
            sys.stderr.flush()
            os._exit(CRASH_EXIT_CODE)
        marked = set(acked)
        acked_at = time.time()
        await repo.mark_published([row for row in rows if row.id in marked])
        self.metrics.published.inc(len(acked))
        self.metrics.batch_duration.observe(time.perf_counter() - started)
        for row in rows:
            if row.id in marked and row.ready_at is not None:
                self.metrics.publish_delay.observe(max(0.0, acked_at - row.ready_at.timestamp()))
        report.published += len(acked)
        report.batches += 1
        if failure is not None:
            raise BrokerUnavailableError(
                f"Kafka did not acknowledge a batch: {failure}"
            ) from failure

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

    async def _refresh_stats(self, repo: RelayRepository) -> None:
        stats = await repo.stats()
        self.metrics.depth.set(stats.depth)
        self.metrics.oldest_age.set(stats.oldest_age_seconds)

    async def _start_producer(self) -> AIOKafkaProducer:
        producer = AIOKafkaProducer(
            **producer_kwargs(self._settings, self._bootstrap),
            client_id="spectral-outbox-relay",
            linger_ms=self.options.linger_ms,
            max_batch_size=self.options.max_batch_bytes,
            # the contract's producer limit: aiokafka's default (1 MiB) refuses a valid record
            # whose value is 1 MiB once its key, headers and framing are added
            max_request_size=MAX_PRODUCE_BYTES,
        )
        try:
            await producer.start()
        except KafkaError as exc:
            with contextlib.suppress(Exception):
                await producer.stop()
            raise BrokerUnavailableError(f"cannot start the Kafka producer: {exc}") from exc
        return producer

    async def _publish(
        self, producer: AIOKafkaProducer, rows: Sequence[OutboxRow]
    ) -> tuple[list[int], BaseException | None]:
        """Send every row, wait for every ack; return the ids safe to mark and the first fault.

        Safe = acknowledged, and every earlier row of the same key in this batch acknowledged too.
        """
        prefix = self._settings.topic_prefix
        pending: list[asyncio.Future[object]] = []
        failure: BaseException | None = None
        for row in rows:
            try:
                fut = await producer.send(
                    topic_for(row.event_type, prefix),
                    value=row.envelope,
                    key=row.record_key.encode(),
                    headers=_headers(row),
                )
            except KafkaError as exc:
                failure = exc
                break
            pending.append(fut)
        results = await asyncio.gather(*pending, return_exceptions=True)
        acked, first_fault = safe_to_mark(rows, results)
        return acked, failure or first_fault

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)
