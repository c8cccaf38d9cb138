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
from collections.abc import Sequence
from typing import Final, Protocol
from uuid import UUID

from consumers.work_executor.claims import Claimed
from consumers.work_executor.metrics import ExecutorMetrics
from consumers.work_executor.pool import WorkerPool
from spectral.faults import Component
from spectral.observability.logging import get_logger
from spectral.retry import Backoff
from spectral.service import Service

log = get_logger(__name__)


class Claim(Protocol):
    """Lease at most ``want`` waiting items (``only``: of these, none other)."""

    async def __call__(self, want: int, only: Sequence[UUID] | None = None) -> Claimed: ...


_MIN_WAIT: Final = 0.005


class Dispatcher(Service):
    """The claim loop (a :class:`~spectral.service.Service`: a failed claim — an outage, or a
    read-only dry run — is retried after a backoff, and an outage logged once, not per try)."""

    name = "work-dispatcher"
    component = Component.DATABASE
    retries_any_failure = True

    def __init__(
        self,
        claim: Claim,
        pool: WorkerPool,
        metrics: ExecutorMetrics,
        *,
        poll_seconds: float,
        failure_backoff: Backoff | None = None,
    ) -> None:
        super().__init__(backoff=failure_backoff or Backoff(base=0.2, cap=5.0))
        self._claim = claim
        self._pool = pool
        self._metrics = metrics
        self._poll = poll_seconds
        self._lock = asyncio.Lock()

    async def stop(self, *, cancel: bool = True, patience: float | None = None) -> None:
        """Stop claiming; a claim in flight is abandoned (its transaction rolls back)."""
        await super().stop(cancel=cancel, patience=patience)

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
            self._metrics.parked(claimed.parked_by)
            if claimed.parked or claimed.resumed:
                log.info(
                    "budget parking",
                    parked=claimed.parked,
                    by_scope={kind.value: n for kind, n in claimed.parked_by.items()},
                    resumed=claimed.resumed,
                )
            if claimed.jobs:
                await self._pool.submit(claimed.jobs)
            return claimed

    async def step(self) -> float:
        claimed = await self.claim_once()
        if claimed.wanted and not claimed.exhausted and self._pool.free > 0:
            return 0.0  # took all it asked for and there is room: more may be waiting
        wait = self._poll
        if claimed.retry_in is not None:
            wait = min(wait, max(claimed.retry_in, _MIN_WAIT))
        return wait
