"""Running the real pieces in-process: the outbox relay and work-executor engines on Kafka."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from prometheus_client import CollectorRegistry

from contracts import WORK_ITEM_ENQUEUED
from spectral.engine.engine import ConsumerEngine, EngineOptions
from spectral.engine.handler import Handler
from spectral.kafka.topics import topic_for
from spectral.outbox.relay import OutboxRelay, RelayMetrics, RelayOptions
from spectral.settings import Settings
from tests.kafka_support import create_topics


async def create_work_topic(bootstrap: str, prefix: str, partitions: int = 3) -> str:
    """The work-item topic, created up front so consumers are assigned it at once."""
    name = topic_for(WORK_ITEM_ENQUEUED, prefix)
    await create_topics(bootstrap, [name], partitions=partitions)
    return name


@asynccontextmanager
async def relay_running(
    settings: Settings, bootstrap: str, database_url: str
) -> AsyncIterator[None]:
    relay = OutboxRelay(
        settings,
        kafka_bootstrap=bootstrap,
        database_url=database_url,
        metrics=RelayMetrics(CollectorRegistry()),
        options=RelayOptions(poll_interval=0.05),
    )
    task = asyncio.create_task(relay.run())
    try:
        yield
    finally:
        relay.stop()
        await asyncio.wait_for(task, timeout=30)


@asynccontextmanager
async def engine_running(
    handler: Handler[Any], settings: Settings, bootstrap: str, database_url: str, group: str
) -> AsyncIterator[ConsumerEngine]:
    engine = ConsumerEngine(
        handler,
        settings,
        kafka_bootstrap=bootstrap,
        database_url=database_url,
        options=EngineOptions(group=group, periodic_interval=0.5, poll_timeout_ms=100),
        registry=CollectorRegistry(),
    )
    task = asyncio.create_task(engine.run())
    try:
        yield engine
    finally:
        engine.stop()
        await asyncio.wait_for(task, timeout=30)
        await handler.close()


async def settled(admin: asyncpg.Pool, timeout: float = 60.0) -> None:
    """Wait until every item is terminal and every thread closed."""
    deadline = time.monotonic() + timeout
    while True:
        live = await admin.fetchval(
            "SELECT (SELECT count(*) FROM work.work_items "
            "        WHERE status NOT IN ('applied', 'dead_letter', 'canceled')) "
            "     + (SELECT count(*) FROM work.threads WHERE status IN ('open', 'running'))"
        )
        if live == 0:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{live} items or threads still live after {timeout}s")
        await asyncio.sleep(0.1)
