"""The dispatcher: claims waiting items whenever the pool has room (ADR-0008's fixed-size pool,
fed by fair claims: claims.py) and hands them to the pool.

Events are wake-ups, the ``work.work_items`` row is the queue of record: a claim is tried at
once when something may have changed — a delivery announced new work, an item of the pool
finished (room), a call ended (its model route has room again), the sweep recovered leases —
and otherwise every ``poll`` seconds (a resumed budget, a retry come due, capacity freed by
another executor), or sooner when a rate-limited route said when it has room again. Claims
never take more than the pool can start at once, so a claimed item waits for nothing but its
own steps (and a tenant's items never queue up locally behind another tenant's).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Final, Protocol
from uuid import UUID

from consumers.work_executor.claims import Claimed
from consumers.work_executor.metrics import ExecutorMetrics
from consumers.work_executor.pool import WorkerPool
from spectral.observability.logging import get_logger
from spectral.retry import Backoff

log = get_logger(__name__)


class Claim(Protocol):
    """Lease at most ``want`` waiting items (``only``: of these, none other)."""

    async def __call__(self, want: int, only: Sequence[UUID] | None = None) -> Claimed: ...


_MIN_WAIT: Final = 0.005


class Dispatcher:
    def __init__(
        self,
        claim: Claim,
        pool: WorkerPool,
        metrics: ExecutorMetrics,
        *,
        poll_seconds: float,
        failure_backoff: Backoff | None = None,
    ) -> None:
        self._claim = claim
        self._pool = pool
        self._metrics = metrics
        self._poll = poll_seconds
        self._backoff = failure_backoff or Backoff(base=0.2, cap=5.0)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    def wake(self) -> None:
        """Something may be claimable now: try at once."""
        self._wake.set()

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="work-dispatcher")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def claim_once(self, only: Sequence[UUID] | None = None) -> Claimed:
        """One claim filling the room the pool has (at most one batch), handed to the pool;
        ``only``: of these items, none other."""
        async with self._lock:
            want = min(self._pool.free, self._pool.batch_size)
            if want < 1:
                return Claimed()
            claimed = await self._claim(want, only)
            for model, reason in claimed.blocked.items():
                self._metrics.provider_wait(model, reason)
            if claimed.parked or claimed.resumed:
                log.info("budget parking", parked=claimed.parked, resumed=claimed.resumed)
            if claimed.jobs:
                await self._pool.submit(claimed.jobs)
            return claimed

    async def _run(self) -> None:
        failures = 0
        while True:
            self._wake.clear()
            try:
                claimed = await self.claim_once()
            except Exception as exc:  # noqa: BLE001 - an outage (or a read-only dry run): retried
                failures += 1
                if failures == 1 or failures % 20 == 0:
                    log.warning("claim failed", error=f"{type(exc).__name__}: {exc}"[:300])
                await asyncio.sleep(self._backoff.delay(failures))
                continue
            failures = 0
            if claimed.wanted and not claimed.exhausted and self._pool.free > 0:
                continue  # took all it asked for and there is room: more may be waiting
            wait = self._poll
            if claimed.retry_in is not None:
                wait = min(wait, max(claimed.retry_in, _MIN_WAIT))
            await self._sleep(wait)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=seconds)
