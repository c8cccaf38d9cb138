"""A lock wait that timed out is counted apart from an unreachable database, so an alert can
tell a transaction holding rows from an outage."""

from __future__ import annotations

import asyncio

import asyncpg
from prometheus_client import CollectorRegistry

from spectral.engine.metrics import ConsumerMetrics
from spectral.engine.retrying import Retrying
from spectral.retry import Backoff


async def test_lock_timeouts_and_outages_are_counted_under_their_own_component() -> None:
    registry = CollectorRegistry()
    retrying = Retrying(
        Backoff(base=0.001, cap=0.001), ConsumerMetrics(registry, "c"), asyncio.Event()
    )
    faults: list[BaseException] = [
        asyncpg.exceptions.LockNotAvailableError("canceling statement due to lock timeout"),
        asyncpg.exceptions.CannotConnectNowError("the database system is starting up"),
        ConnectionRefusedError(),
    ]

    async def operation() -> str:
        if faults:
            raise faults.pop(0)
        return "done"

    assert await retrying("database", operation) == "done"

    def retries(component: str) -> float | None:
        return registry.get_sample_value(
            "spectral_consumer_infrastructure_retries_total",
            {"consumer": "c", "component": component},
        )

    assert retries("database_lock") == 1
    assert retries("database") == 2
