"""Infrastructure faults pause and retry; they never dead-letter (invariant 3)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from spectral.db.connect import is_transient
from spectral.engine.metrics import ConsumerMetrics
from spectral.errors import PermanentError, TransientError
from spectral.kafka.produce import is_transient as kafka_transient
from spectral.observability.logging import get_logger
from spectral.retry import Backoff

log = get_logger(__name__)

T = TypeVar("T")

ATTEMPTS_WHILE_STOPPING = 3
"""Retries still made once the engine was asked to stop, before it gives up on a fault."""


LOCK_NOT_AVAILABLE = "55P03"
"""SQLSTATE of a statement that waited on a lock past ``lock_timeout``."""


def fault_component(component: str, exc: BaseException) -> str:
    """The ``component`` label of a retried fault: a database lock wait that timed out is
    ``database_lock`` (a transaction holds rows or a table: a frozen member, a maintenance
    rotation, a manual session), apart from an unreachable database."""
    if component == "database" and getattr(exc, "sqlstate", None) == LOCK_NOT_AVAILABLE:
        return "database_lock"
    return component


def transient(exc: BaseException) -> bool:
    """A fault of the database or the broker, not of the data."""
    if isinstance(exc, KafkaError):
        return kafka_transient(exc)
    return is_transient(exc)


class Retrying:
    """``await retrying("database", operation)``: await ``operation()`` until it succeeds,
    pausing with capped exponential backoff after each transient fault (counted and logged);
    anything else is raised at once."""

    def __init__(self, backoff: Backoff, metrics: ConsumerMetrics, stopping: asyncio.Event) -> None:
        self._backoff = backoff
        self._metrics = metrics
        self._stopping = stopping

    async def __call__(self, component: str, operation: Callable[[], Awaitable[T]]) -> T:
        attempt = 0
        while True:
            try:
                return await operation()
            except (CommitFailedError, IllegalStateError, PermanentError):
                raise
            except Exception as exc:
                if not transient(exc):
                    raise
                attempt += 1
                if self._stopping.is_set() and attempt > ATTEMPTS_WHILE_STOPPING:
                    raise TransientError(f"{component} unavailable while stopping: {exc}") from exc
                delay = self._backoff.delay(attempt)
                self._metrics.retried(fault_component(component, exc))
                log.warning(
                    "infrastructure fault; pausing before retry",
                    component=fault_component(component, exc),
                    attempt=attempt,
                    delay=delay,
                    error=f"{type(exc).__name__}: {exc}",
                )
                await asyncio.sleep(delay)
