"""The ``work-executor`` handler run by the consumer engine.

Events are wake-ups; the ``work.work_items`` row is the queue of record (ADR-0008).

* ``apply`` (in the engine's transaction, set-based): claims the delivered items that are due
  and claimable with one conditional UPDATE — the ADR-0023 lease; a replica that loses the
  claim (or finds the item running, done, or not yet due) marks the delivery ``stale`` and pays
  nothing. The claim commits with the dedup record, so a redelivered event never claims twice.
* ``after_commit``: hands the claimed items to the bounded pool (pool.py), which runs the items
  waiting for room together as one batch (executor.py: shared statements and transactions per
  step, one paid call per item); the paid work runs there, outside any transaction, and never
  holds up the engine's offsets for longer than it takes to find room in the pool.
* the sweep, every ``work_sweep_interval_seconds`` from a task ``start`` launches (the engine
  calls it when a live consumer starts, before any record arrives, so a restarted executor
  recovers its predecessor's leases even when no event ever comes; a replay never calls it, so
  a replay claims only the items its own records name): stamp-based recovery of stale leases,
  due items no event brought, parents left open, queue gauges.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from typing import Any, Final
from uuid import UUID, uuid4

import asyncpg

from consumers.work_executor.executor import ExecutorConfig, WorkExecutor
from consumers.work_executor.metrics import AttemptOutcome, ExecutorMetrics
from consumers.work_executor.pool import Job, JobDone, WorkerPool
from consumers.work_executor.repository import ExecutorRepository
from consumers.work_executor.retry import RetryPolicy
from contracts import WORK_ITEM_ENQUEUED
from spectral.consumer.handler import Delivery, Handler, HandlerResult
from spectral.db.connect import create_pool
from spectral.llm.seam import Synthesizer
from spectral.observability.logging import get_logger
from spectral.settings import Settings
from spectral.work.types import Conn

log = get_logger(__name__)

NAME: Final = "work-executor"
ROLE: Final = "spectral_executor"
DB_CONNECTIONS: Final = 8
"""The executor's own database connections, at most (plus two): a batch holds one only for the
statements of one step, never across a paid call, so many items in flight need few."""


class WorkExecutorHandler(Handler[Job]):
    """Claims in the engine's transaction, executes in its own pool, sweeps in the background
    of a live consumer. ``carry``: the claimed items, handed to the pool after the commit."""

    database_role = ROLE

    def __init__(
        self,
        settings: Settings,
        database_url: str,
        synthesizer: Synthesizer,
        metrics: ExecutorMetrics,
        config: ExecutorConfig,
    ) -> None:
        self._settings = settings
        self._database_url = database_url
        self._synthesizer = synthesizer
        self._metrics = metrics
        self._config = config
        self._db: asyncpg.Pool | None = None
        self._executor: WorkExecutor | None = None
        self._repo: ExecutorRepository | None = None
        # Batches of half the pool: while one batch waits on the database, the other runs
        # (one batch of the whole pool left the process idle during every round trip; with the
        # stub synthesizer 16 of 32 measured ~10 % faster than 32, 8 no better than 16).
        self._pool = WorkerPool(
            settings.work_pool_size, self._run, batch_size=max(1, settings.work_pool_size // 2)
        )
        self._starting = asyncio.Lock()
        self._sweeper: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    @property
    def name(self) -> str:
        return NAME

    @property
    def event_types(self) -> Sequence[str]:
        return (WORK_ITEM_ENQUEUED,)

    @property
    def worker_id(self) -> str:
        return self._config.worker_id

    async def start(self) -> None:
        """A live consumer starts: open the executor and start the sweeper (idempotent)."""
        await self._open()
        if self._sweeper is None:
            self._stopping.clear()
            self._sweeper = asyncio.create_task(self._sweep_forever(), name="work-sweeper")

    async def _open(self) -> WorkExecutor:
        """Open the executor's own connection pool (idempotent); no background work."""
        async with self._starting:
            if self._executor is None:
                self._db = await create_pool(
                    self._database_url,
                    role=self.database_role,
                    min_size=1,
                    max_size=min(self._settings.work_pool_size, DB_CONNECTIONS) + 2,
                )
                self._repo = ExecutorRepository(self._db)
                self._executor = WorkExecutor(
                    self._repo,
                    self._synthesizer,
                    RetryPolicy.from_settings(self._settings),
                    self._metrics,
                    self._config,
                )
            return self._executor

    async def sweep_once(self) -> int:
        """One sweep; the claimed items go to the pool. Returns how many were claimed."""
        executor = await self._open()
        jobs = await executor.sweep(self._pool.free)
        if jobs:
            await self._pool.submit(jobs)
        return len(jobs)

    async def _sweep_forever(self) -> None:
        """Sweep now, then every interval, until ``aclose`` asks it to stop: it stops between
        sweeps, never between a sweep's claim and its hand-over to the pool."""
        interval = self._settings.work_sweep_interval_seconds
        while True:
            try:
                await self.sweep_once()
            except Exception as exc:  # noqa: BLE001 - a failed sweep is retried next interval
                log.warning("sweep failed", error=f"{type(exc).__name__}: {exc}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=interval)
            if self._stopping.is_set():
                return

    async def _run(self, jobs: Sequence[Job], done: JobDone) -> None:
        executor = await self._open()
        await executor.run_batch(jobs, done)

    # -- the engine's hooks ----------------------------------------------------------------------

    async def apply(self, conn: Conn, deliveries: Sequence[Delivery]) -> HandlerResult[Job]:
        await self._open()
        assert self._repo is not None  # noqa: S101 - set by _open()
        wanted: dict[UUID, list[str]] = {}
        for delivery in deliveries:
            payload: Any = delivery.envelope.payload
            wanted.setdefault(payload.work_item_id, []).append(delivery.idempotency_key)
        token = uuid4()
        claimed = set(await self._repo.claim_delivered(conn, sorted(wanted), token, self.worker_id))
        stale = {key for item, keys in wanted.items() if item not in claimed for key in keys}
        for _ in range(len(wanted) - len(claimed)):
            self._metrics.attempt(AttemptOutcome.SKIPPED)
        return HandlerResult(
            stale=stale,
            facts={"claimed": len(claimed), "not_claimed": len(wanted) - len(claimed)},
            carry=[(item, token) for item in sorted(claimed)],
        )

    async def after_commit(self, result: HandlerResult[Job]) -> None:
        if result.carry:
            await self._pool.submit(result.carry)

    # -- the end ---------------------------------------------------------------------------------

    async def drain(self) -> None:
        """Wait until every item handed to the pool has been processed."""
        await self._pool.join()

    async def close(self) -> None:
        """The engine's end of a run (see ``aclose``)."""
        await self.aclose()

    async def aclose(self, drain_seconds: float | None = None) -> None:
        """Stop sweeping (a sweep under way finishes and hands its claims to the pool), let the
        items in flight finish (both within ``drain_seconds``, default the model timeout plus
        5 s), then close. An item still running after that keeps its lease and is recovered by
        the next executor (its attempt counted as used)."""
        patience = (
            drain_seconds if drain_seconds is not None else self._settings.llm_timeout_seconds + 5
        )
        deadline = time.monotonic() + patience
        if self._sweeper is not None:
            self._stopping.set()
            done, _ = await asyncio.wait({self._sweeper}, timeout=patience)
            if not done:
                self._sweeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._sweeper
            self._sweeper = None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._pool.join(), timeout=max(deadline - time.monotonic(), 0.0))
        await self._pool.close()
        closer = getattr(self._synthesizer, "aclose", None)
        if closer is not None:
            await closer()
        if self._executor is not None:
            await self._executor.aclose()
        if self._db is not None:
            await self._db.close()
            self._db = None
            self._executor = None
