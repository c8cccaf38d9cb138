"""The ``work-executor`` handler run by the consumer engine.

Events are wake-ups; the ``work.work_items`` row is the queue of record (ADR-0008).

* ``apply`` (in the engine's transaction, set-based): a delivery of an item still waiting
  (queued, waiting for a retry, parked) is a wake-up, recorded as applied; one of an item that
  runs, ended or was canceled is ``stale``. Nothing is claimed here: which items run is the
  claims' decision (claims.py — fair across tenants, by priority, within the provider limits and
  the org budgets), not the order events happen to arrive in.
* ``after_commit``: a live consumer wakes the dispatcher (dispatch.py), which claims whatever the
  pool has room for and hands it to the bounded pool (pool.py), which runs the items waiting
  for room together as one batch (executor.py: shared statements and transactions per step,
  one paid call per item); the paid work runs there, outside any transaction. A replay (which
  never calls ``start``) only notes the items its records woke: ``drain`` claims those — and
  nothing else — and waits for them.
* ``start`` (a live consumer, before any record arrives) launches the dispatcher's loop and the
  sweep, every ``work_sweep_interval_seconds``: stamp-based recovery of stale leases (a
  restarted executor recovers its predecessor's leases even when no event ever comes), parents
  left open, queue gauges. The dispatcher also claims on its own, every
  ``work_claim_poll_seconds`` when idle: waiting items no event announced are never stranded.
  A replay, a dry run or a rebuild never start either.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any, Final
from uuid import UUID, uuid4

import asyncpg

from consumers.work_executor.claims import Claimed, ClaimRepository
from consumers.work_executor.dispatch import Dispatcher
from consumers.work_executor.executor import ExecutorConfig, WorkExecutor
from consumers.work_executor.metrics import AttemptOutcome, ExecutorMetrics
from consumers.work_executor.pool import Job, JobDone, WorkerPool
from consumers.work_executor.reads import ExecutorReads
from consumers.work_executor.retry import RetryStrategy
from consumers.work_executor.schedule import Resolve
from consumers.work_executor.store import Store
from contracts import WORK_ITEM_ENQUEUED
from producers.work.domain.functions import Functions, installed_functions
from producers.work.domain.settings import WorkSettings
from producers.work.domain.types import Conn
from spectral.db.connect import create_pool
from spectral.engine.handler import Delivery, Handler, HandlerResult
from spectral.llm.seam import Synthesizer
from spectral.llm.settings import LlmSettings
from spectral.observability.logging import get_logger
from spectral.settings import Settings

log = get_logger(__name__)

NAME: Final = "work-executor"
ROLE: Final = "spectral_executor"
DB_CONNECTIONS: Final = 8
"""The executor's own database connections, at most (plus two): a batch holds one only for the
statements of one step, never across a paid call, so many items in flight need few."""


class WorkExecutorHandler(Handler[UUID]):
    """Wake-ups in the engine's transaction, fair claims and execution in its own pool, sweeps
    in the background of a live consumer. ``carry``: the woken items (still waiting)."""

    database_role = ROLE

    def __init__(  # noqa: PLR0917 - the deployment's parts, as build() wires them
        self,
        settings: Settings,
        database_url: str,
        synthesizer: Synthesizer,
        metrics: ExecutorMetrics,
        config: ExecutorConfig,
        resolve: Resolve | None = None,
        *,
        functions: Functions | None = None,
        store: Callable[[asyncpg.Pool, Functions], Store] = Store.over,
    ) -> None:
        self._settings = settings
        self._work = WorkSettings.of(settings)
        self._database_url = database_url
        self._resolve: Resolve = resolve or (lambda _function, _org: None)
        self._synthesizer = synthesizer
        self._metrics = metrics
        self._config = config
        self._db: asyncpg.Pool | None = None
        self._functions = functions or installed_functions()
        self._store = store
        self._executor: WorkExecutor | None = None
        self._reads: ExecutorReads | None = None
        self._dispatcher: Dispatcher | None = None
        # Batches of half the pool: while one batch waits on the database, the other runs
        # (one batch of the whole pool left the process idle during every round trip; with the
        # stub synthesizer 16 of 32 measured ~10 % faster than 32, 8 no better than 16).
        self._pool = WorkerPool(
            self._work.work_pool_size,
            self._run,
            batch_size=max(1, self._work.work_pool_size // 2),
            on_room=self._wake,
        )
        self._starting = asyncio.Lock()
        self._sweeper: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._woken: set[UUID] = set()
        """Items a replay's records woke, not claimed yet (``drain`` claims them)."""

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
        """A live consumer starts: open the executor, start claiming and sweeping (idempotent)."""
        await self._open()
        assert self._dispatcher is not None  # noqa: S101 - set by _open()
        if self._sweeper is None:
            self._stopping.clear()
            self._dispatcher.start()
            self._sweeper = asyncio.create_task(self._sweep_forever(), name="work-sweeper")

    async def _open(self) -> WorkExecutor:
        """Open the executor's own connection pool (idempotent); no background work."""
        async with self._starting:
            if self._executor is None:
                self._db = await create_pool(
                    self._database_url,
                    role=self.database_role,
                    min_size=1,
                    max_size=min(self._work.work_pool_size, DB_CONNECTIONS) + 2,
                )
                store = self._store(self._db, self._functions)
                self._reads = store.reads
                self._executor = WorkExecutor(
                    store,
                    self._synthesizer,
                    RetryStrategy.from_settings(self._settings),
                    self._metrics,
                    self._config,
                    functions=self._functions,
                    on_capacity=self._wake,
                )
                claims = ClaimRepository(
                    self._db,
                    resolve=self._resolve,
                    limits=self._config.limits,
                    tenant_cap=self._work.work_tenant_max_in_flight or None,
                )
                self._dispatcher = Dispatcher(
                    lambda want, only=None: claims.claim(want, uuid4(), self.worker_id, only=only),
                    self._pool,
                    self._metrics,
                    poll_seconds=self._work.work_claim_poll_seconds,
                )
            return self._executor

    def _wake(self) -> None:
        if self._dispatcher is not None:
            self._dispatcher.wake()

    async def sweep_once(self) -> int:
        """One sweep (recovered leases go to the pool), then one claim for the room left.
        Returns how many items were handed to the pool."""
        executor = await self._open()
        jobs = await executor.sweep(self._pool.free)
        if jobs:
            await self._pool.submit(jobs)
        claimed = await self.claim_once()
        return len(jobs) + len(claimed.jobs)

    async def claim_once(self, only: Sequence[UUID] | None = None) -> Claimed:
        """One claim for the room the pool has (the dispatcher does this whenever woken);
        ``only``: these items and no other."""
        await self._open()
        assert self._dispatcher is not None  # noqa: S101 - set by _open()
        return await self._dispatcher.claim_once(only)

    async def _sweep_forever(self) -> None:
        """Sweep now, then every interval, until ``aclose`` asks it to stop: it stops between
        sweeps, never between a sweep's claim and its hand-over to the pool."""
        interval = self._work.work_sweep_interval_seconds
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

    async def apply(self, conn: Conn, deliveries: Sequence[Delivery]) -> HandlerResult[UUID]:
        await self._open()
        assert self._reads is not None  # noqa: S101 - set by _open()
        wanted: dict[UUID, list[str]] = {}
        for delivery in deliveries:
            payload: Any = delivery.envelope.payload
            wanted.setdefault(payload.work_item_id, []).append(delivery.idempotency_key)
        waiting = await self._reads.waiting_items(conn, sorted(wanted))
        stale = {key for item, keys in wanted.items() if item not in waiting for key in keys}
        for _ in range(len(wanted) - len(waiting)):
            self._metrics.attempt(AttemptOutcome.SKIPPED)
        return HandlerResult(
            stale=stale,
            facts={"waiting": len(waiting), "not_waiting": len(wanted) - len(waiting)},
            carry=sorted(waiting),
        )

    async def after_commit(self, result: HandlerResult[UUID]) -> None:
        if not result.carry:
            return
        if self._sweeper is not None:  # live: the dispatcher claims, fairly
            self._wake()
        else:  # a replay: its records' items, claimed by drain()
            self._woken.update(result.carry)

    # -- the end ---------------------------------------------------------------------------------

    async def drain(self) -> None:
        """Wait until the work woken so far is done: the items handed to the pool processed,
        and the items a replay's records woke claimed — each as soon as it is claimable, none
        other — until a claim finds nothing more of them to take now."""
        while True:
            await self._pool.join()
            if not self._woken or self._dispatcher is None:
                return
            claimed = await self._dispatcher.claim_once(sorted(self._woken))
            self._woken.difference_update(item for item, _ in claimed.jobs)
            if not claimed.jobs:
                self._woken.clear()  # not claimable now (not due, parked): the live executor's
                return

    async def close(self) -> None:
        """The engine's end of a run (see ``aclose``)."""
        await self.aclose()

    async def aclose(self, drain_seconds: float | None = None) -> None:
        """Stop claiming and sweeping (a sweep under way finishes and hands its claims to the
        pool), let the items in flight finish (both within ``drain_seconds``, default the model
        timeout plus 5 s), then close. An item still running after that keeps its lease and is
        recovered by the next executor (its attempt counted as used)."""
        patience = (
            drain_seconds
            if drain_seconds is not None
            else LlmSettings.of(self._settings).llm_timeout_seconds + 5
        )
        deadline = time.monotonic() + patience
        if self._dispatcher is not None:
            await self._dispatcher.stop()
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
            self._dispatcher = None
