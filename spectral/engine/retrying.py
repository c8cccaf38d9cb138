"""Infrastructure faults pause and retry; they never dead-letter (invariant 3).

The engine's binding of :func:`spectral.service.wait_out`: its backoff, its retry counter
(``spectral_consumer_infrastructure_retries_total{component}``, a lock wait past
``lock_timeout`` apart as ``database_lock``) and its stop request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from spectral.engine.metrics import ConsumerMetrics
from spectral.retry import Backoff
from spectral.service import wait_out

T = TypeVar("T")


class Retrying:
    """``await retrying("database", operation)``: await ``operation()`` until it succeeds,
    pausing with capped exponential backoff after each transient fault (counted, and reported
    as an outage: its start, reminders and end are logged, not every retry); anything else is
    raised at once."""

    def __init__(self, backoff: Backoff, metrics: ConsumerMetrics, stopping: asyncio.Event) -> None:
        self._backoff = backoff
        self._metrics = metrics
        self._stopping = stopping

    async def __call__(self, component: str, operation: Callable[[], Awaitable[T]]) -> T:
        return await wait_out(
            component,
            operation,
            backoff=self._backoff,
            stopping=self._stopping,
            on_retry=self._metrics.retried,
        )
