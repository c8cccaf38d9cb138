"""Consumer progress: lag on a timer, last progress per partition, stalled partitions, readiness.

The consumer engine calls an :class:`EngineHook` at six points — started (with its record
source and database pool), partitions assigned, partitions being revoked and revoked, offsets
committed, stopped — and knows nothing else about this module. :class:`ProgressMonitor` is the
hook a `spectral consume` process uses; the base class, which observes nothing, is the default.

Every ``interval`` seconds the monitor asks the broker for the end offsets of the assigned
partitions and computes, per partition:

* ``spectral_consumer_lag`` = end offset - committed offset (before the group's first commit on
  a partition: - the partition's first offset, so records retention deleted are not lag; the
  committed offset the group had when the partition was assigned counts). A consumer
  stuck in a retry loop keeps exporting a growing lag, not the last value it committed with.
* ``spectral_consumer_last_progress_timestamp_seconds``: when the committed offset last moved,
  or the partition was last seen caught up (nothing to do is not a stall).
* ``spectral_consumer_partition_stalled`` = 1 when the committed offset has not moved for
  ``stall_after`` seconds while the end offset grew past it; a WARNING ``partition stalled``
  line is logged when it starts and an INFO ``partition progressing again`` when it ends.

Readiness checks it maintains (see health.py): ``group`` (joined the consumer group: partitions
assigned, possibly none), ``kafka`` (the last end-offset request answered; a member holding no
partitions has none to ask, and is ready while its group check is) and ``database`` (a
``SELECT 1`` through the engine's pool).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition
from prometheus_client import CollectorRegistry, Gauge

from spectral.observability.health import Health
from spectral.observability.logging import get_logger

log = get_logger(__name__)


class EngineHook:
    """What the consumer engine reports, all calls from its event loop. The defaults observe
    nothing; :class:`ProgressMonitor` overrides them."""

    async def started(self, source: Any, pool: Any) -> None:
        """The record source (spectral.kafka.transport.RecordSource, started) and the database
        pool (None when the run borrows a connection) are up."""

    def assigned(self, partitions: Collection[TopicPartition]) -> None:
        """The group gave this member ``partitions`` (possibly none)."""

    def revoking(self, partitions: Collection[TopicPartition]) -> None:
        """``partitions`` are about to leave: the engine now waits for its batches in flight."""

    def revoked(self, partitions: Collection[TopicPartition]) -> None:
        """``partitions`` left this member (after its in-flight batch committed)."""

    def committed(self, offsets: Mapping[TopicPartition, int]) -> None:
        """``offsets`` (next offset to read) were committed after the database commit."""

    async def stopped(self) -> None:
        """The engine is closing."""


@dataclass
class _Partition:
    committed: int | None = None
    end: int | None = None
    progress_at: float = 0.0
    """Wall-clock time of the last progress (commit moved, or caught up)."""
    end_at_progress: int | None = None
    stalled: bool = False
    started: bool = False
    """The group's committed offset at assignment was read."""


class ProgressMetrics:
    def __init__(self, registry: CollectorRegistry, consumer: str) -> None:
        self.consumer = consumer
        labels = ["consumer", "topic", "partition"]
        self.lag = Gauge(
            "spectral_consumer_lag",
            "Records between the committed offset and the partition's end, measured on a timer.",
            labels,
            registry=registry,
        )
        self.last_progress = Gauge(
            "spectral_consumer_last_progress_timestamp_seconds",
            "When the partition's committed offset last moved or it was last caught up.",
            labels,
            registry=registry,
        )
        self.stalled = Gauge(
            "spectral_consumer_partition_stalled",
            "1 while the committed offset is frozen and the end offset grows past it.",
            labels,
            registry=registry,
        )

    def forget(self, tp: TopicPartition) -> None:
        for gauge in (self.lag, self.last_progress, self.stalled):
            with contextlib.suppress(KeyError):
                gauge.remove(self.consumer, tp.topic, str(tp.partition))

    def set(self, tp: TopicPartition, lag: int, progress_at: float, *, stalled: bool) -> None:
        labels = (self.consumer, tp.topic, str(tp.partition))
        self.lag.labels(*labels).set(lag)
        self.last_progress.labels(*labels).set(progress_at)
        self.stalled.labels(*labels).set(1 if stalled else 0)


class ProgressMonitor(EngineHook):
    """Lag, last progress and stalls of one consumer deployment's partitions (see module)."""

    def __init__(
        self,
        consumer_name: str,
        registry: CollectorRegistry,
        health: Health | None = None,
        *,
        interval: float = 10.0,
        stall_after: float = 120.0,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = consumer_name
        self.metrics = ProgressMetrics(registry, consumer_name)
        self._health = health
        self._interval = interval
        self._stall_after = stall_after
        self._now = wall_clock
        self._partitions: dict[TopicPartition, _Partition] = {}
        self._source: Any = None
        self._task: asyncio.Task[None] | None = None

    # -- the hook ---------------------------------------------------------------------------

    async def started(self, source: Any, pool: Any) -> None:
        self._source = source
        if self._health is not None:
            self._health.set_check("group", ok=False, detail="joining the consumer group")
            self._health.set_check("kafka", ok=False, detail="not measured yet")
            if pool is not None:
                self._health.probe("database", lambda: pool.fetchval("SELECT 1"))
        self._task = asyncio.create_task(self._measure_forever(), name="progress-monitor")

    def assigned(self, partitions: Collection[TopicPartition]) -> None:
        now = self._now()
        for tp in partitions:
            self._partitions.setdefault(tp, _Partition(progress_at=now))
        if self._health is not None:
            self._health.set_check("group", ok=True, detail=f"{len(partitions)} partitions")

    def revoked(self, partitions: Collection[TopicPartition]) -> None:
        for tp in partitions:
            self._partitions.pop(tp, None)
            self.metrics.forget(tp)
        if self._health is not None:
            self._health.set_check("group", ok=False, detail="rebalancing")

    def committed(self, offsets: Mapping[TopicPartition, int]) -> None:
        now = self._now()
        for tp, offset in offsets.items():
            state = self._partitions.setdefault(tp, _Partition(progress_at=now))
            if state.committed is None or offset > state.committed:
                state.committed = offset
                state.progress_at = now
                state.end_at_progress = state.end

    async def stopped(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for tp in list(self._partitions):
            self.metrics.forget(tp)
        self._partitions.clear()

    # -- the timer --------------------------------------------------------------------------

    async def _measure_forever(self) -> None:
        while True:
            try:
                await self.measure()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - measuring never stops consumption
                if self._health is not None:
                    self._health.set_check("kafka", ok=False, detail=f"{type(exc).__name__}: {exc}")
                log.warning("lag measurement failed", consumer=self.name, error=str(exc))
            await asyncio.sleep(self._interval)

    async def measure(self) -> None:
        """One measurement of every assigned partition (public for tests)."""
        source = self._source
        if source is None:
            return
        tps = [tp for tp in source.assignment() if tp in self._partitions]
        if not tps:
            # A member with no partitions (scaled out past the partition count) is a standby,
            # not a fault: there is nothing to measure, and the group it joined answered its
            # heartbeats (a broker lost meanwhile shows as a rebalance, the group check).
            if self._health is not None and not source.assignment():
                self._health.set_check("kafka", ok=True, detail="no partitions to measure")
            return
        ends = await source.end_offsets(tps)
        if self._health is not None:
            self._health.set_check("kafka", ok=True)
        await self._start(tps, ends)
        # A group that never committed on a partition starts at its first record still there:
        # what retention deleted before it is not lag (counting from 0 made a lag nothing could
        # work off).
        never = [
            tp for tp in tps if tp in self._partitions and self._partitions[tp].committed is None
        ]
        firsts = await source.beginning_offsets(never) if never else {}
        for tp in tps:
            state = self._partitions.get(tp)
            if state is not None:  # else revoked meanwhile
                self._update(tp, state, ends[tp], firsts.get(tp, 0))

    async def _start(self, tps: list[TopicPartition], ends: Mapping[TopicPartition, int]) -> None:
        """First measurement of newly assigned partitions: the group's committed offset then."""
        for tp in tps:
            state = self._partitions.get(tp)
            if state is None or state.started:  # revoked meanwhile, or measured before
                continue
            state.started = True
            if state.committed is None:
                state.committed = await self._starting_offset(tp)
            state.end_at_progress = ends[tp]

    async def _starting_offset(self, tp: TopicPartition) -> int | None:
        """The group's committed offset when the partition came (None: nothing committed)."""
        committed = await self._source.committed(tp)
        return int(committed) if committed is not None else None

    def _update(self, tp: TopicPartition, state: _Partition, end: int, first: int = 0) -> None:
        now = self._now()
        state.end = end
        # Nothing ever committed (a new group reading from the start): every record still in
        # the partition, from its first offset (``first``).
        lag = max(end - (first if state.committed is None else state.committed), 0)
        if lag == 0:
            state.progress_at = now  # caught up: nothing to do is not a stall
            state.end_at_progress = end
        grew = state.end_at_progress is not None and end > state.end_at_progress
        stalled = lag > 0 and grew and now - state.progress_at >= self._stall_after
        if stalled and not state.stalled:
            log.warning(
                "partition stalled",
                consumer=self.name,
                topic=tp.topic,
                partition=tp.partition,
                committed_offset=state.committed,
                end_offset=end,
                lag=lag,
                seconds_without_progress=round(now - state.progress_at, 1),
            )
        elif state.stalled and not stalled:
            log.info(
                "partition progressing again",
                consumer=self.name,
                topic=tp.topic,
                partition=tp.partition,
                committed_offset=state.committed,
            )
        state.stalled = stalled
        self.metrics.set(tp, lag, state.progress_at, stalled=stalled)
