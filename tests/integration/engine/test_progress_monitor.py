"""Lag, last progress and stalls measured on a timer, against the real broker and database.

A handler that keeps failing for an infrastructure reason keeps the engine in its retry loop:
nothing commits while the topic grows. Before the monitor, `spectral_consumer_lag` froze at the
value of the last commit (0 here: nothing was ever committed, so no series at all); now the lag
grows, the partition is reported stalled (metric and log line) and readiness stays green only
for what is true (the group is joined, Kafka and the database answer)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import asyncpg
import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from contracts import FAILURE_CLUSTER_DETECTED
from spectral.engine.engine import ConsumerEngine, EngineOptions
from spectral.engine.handler import Delivery, Handler, HandlerResult
from spectral.errors import TransientError
from spectral.kafka.topics import topic_for
from spectral.observability.health import Health, run_with_health
from spectral.observability.progress import ProgressMonitor
from spectral.retry import Backoff
from spectral.settings import Settings
from tests.kafka_support import cluster_event, create_topics, publish_envelopes
from tests.support import eventually

pytestmark = pytest.mark.integration


class Wedged(Handler[None]):
    """Applies nothing until ``released``; until then every batch fails transiently."""

    name = "progress-test"
    event_types = (FAILURE_CLUSTER_DETECTED,)

    def __init__(self) -> None:
        self.released = False

    async def apply(
        self, conn: asyncpg.Connection, deliveries: Sequence[Delivery]
    ) -> HandlerResult[None]:
        del conn, deliveries
        if not self.released:
            raise TransientError("database unavailable (simulated)")
        return HandlerResult()


def _engine(  # noqa: PLR0917 - the engine's own parameters, passed through
    handler: Any,
    settings: Settings,
    kafka_bootstrap: str,
    database_url: str,
    monitor: ProgressMonitor,
    registry: CollectorRegistry | None = None,
) -> ConsumerEngine:
    """A consumer engine with quick retries, observed by ``monitor``."""
    return ConsumerEngine(
        handler,
        settings,
        kafka_bootstrap=kafka_bootstrap,
        database_url=database_url,
        options=EngineOptions(backoff=Backoff(base=0.2, cap=0.5), max_batch=50),
        registry=registry or CollectorRegistry(),
        hook=monitor,
    )


def _value(registry: CollectorRegistry, name: str, partition: int) -> float | None:
    for metric in registry.collect():
        for sample in metric.samples:
            if sample.name == name and sample.labels.get("partition") == str(partition):
                return sample.value
    return None


async def test_a_consumer_stuck_retrying_reports_growing_lag_and_a_stalled_partition(
    settings: Settings, kafka_bootstrap: str, database_url: str
) -> None:
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await create_topics(kafka_bootstrap, [topic], partitions=1)
    registry = CollectorRegistry()
    health = Health(liveness_timeout=10.0, probe_interval=0.5)
    monitor = ProgressMonitor("progress-test", registry, health, interval=0.3, stall_after=1.5)
    handler = Wedged()
    engine = _engine(handler, settings, kafka_bootstrap, database_url, monitor, registry)
    await publish_envelopes(kafka_bootstrap, topic, [cluster_event() for _ in range(5)])
    with capture_logs() as logs:
        running = asyncio.create_task(run_with_health(health, engine.run()))
        try:

            async def ready() -> bool:
                return health.ready()[0]

            await eventually(ready, timeout=60)
            lag = "spectral_consumer_lag"

            async def lag_is(n: int) -> bool:
                return _value(registry, lag, 0) == n

            await eventually(lambda: lag_is(5), timeout=30)
            # The end grows while nothing commits: lag follows, the partition stalls.
            await publish_envelopes(kafka_bootstrap, topic, [cluster_event() for _ in range(3)])
            await eventually(lambda: lag_is(8), timeout=30)

            async def stalled() -> bool:
                return _value(registry, "spectral_consumer_partition_stalled", 0) == 1

            await eventually(stalled, timeout=30)
            assert any(e["event"] == "partition stalled" for e in logs)
            stuck_since = _value(registry, "spectral_consumer_last_progress_timestamp_seconds", 0)

            handler.released = True  # the database is back: the backlog commits

            async def recovered() -> bool:
                return _value(registry, "spectral_consumer_partition_stalled", 0) == 0 and (
                    _value(registry, lag, 0) == 0
                )

            await eventually(recovered, timeout=30)
            progressed = _value(registry, "spectral_consumer_last_progress_timestamp_seconds", 0)
            assert progressed is not None
            assert stuck_since is not None
            assert progressed > stuck_since
            assert any(e["event"] == "partition progressing again" for e in logs)
        finally:
            engine.stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(running, timeout=30)
    assert _value(registry, lag, 0) is None  # series removed when the engine stops


async def test_liveness_fails_when_the_event_loop_is_wedged() -> None:
    health = Health(liveness_timeout=0.3, probe_interval=10)
    beating = asyncio.create_task(health.heartbeat())
    try:
        await asyncio.sleep(0.1)
        assert health.live()[0]
        import time  # noqa: PLC0415

        time.sleep(0.6)  # a blocking call: the loop makes no progress meanwhile
        assert not health.live()[0]
        await asyncio.sleep(0.6)
        assert health.live()[0]
    finally:
        beating.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beating


class Idle(Handler[None]):
    name = "progress-idle-test"
    event_types = (FAILURE_CLUSTER_DETECTED,)

    async def apply(
        self, conn: asyncpg.Connection, deliveries: Sequence[Delivery]
    ) -> HandlerResult[None]:
        del conn, deliveries
        return HandlerResult()


async def test_a_member_without_partitions_is_ready(
    settings: Settings, kafka_bootstrap: str, database_url: str
) -> None:
    """Scaled out past the partition count, a member gets no partitions: it is a healthy
    standby (it takes over on the next rebalance), so /readyz must say ready — a compose or
    Kubernetes probe on a forever not-ready member would restart it or hold a rollout."""
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await create_topics(kafka_bootstrap, [topic], partitions=1)
    members = []
    for _ in range(2):
        health = Health(liveness_timeout=10.0, probe_interval=0.5)
        monitor = ProgressMonitor(Idle.name, CollectorRegistry(), health, interval=0.3)
        engine = _engine(Idle(), settings, kafka_bootstrap, database_url, monitor)
        running = asyncio.create_task(run_with_health(health, engine.run()))
        members.append((health, engine, running))
    try:

        async def settled() -> bool:
            groups = [h.ready()[1]["checks"].get("group", {}) for h, *_ in members]
            shares = sorted(str(g.get("detail")) for g in groups if g.get("ok"))
            return shares == ["0 partitions", "1 partitions"]

        await eventually(settled, timeout=90)

        async def all_ready() -> bool:
            return all(h.ready()[0] for h, *_ in members)

        await eventually(all_ready, timeout=30)
    finally:
        for _, engine, _ in members:
            engine.stop()
        for *_, running in members:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(running, timeout=30)


async def test_a_new_group_on_a_topic_whose_records_aged_out_has_no_lag(
    settings: Settings, kafka_bootstrap: str, database_url: str
) -> None:
    """A deployment whose group never committed starts at the partition's first record that is
    still there: records retention already deleted are not lag. Counting from offset 0 showed a
    lag that could never be worked off (and a dashboard that never showed caught up)."""
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await create_topics(kafka_bootstrap, [topic], partitions=1)
    await publish_envelopes(kafka_bootstrap, topic, [cluster_event() for _ in range(5)])
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:  # what retention does to old segments: the log now starts at offset 5
        await admin.delete_records({TopicPartition(topic, 0): RecordsToDelete(5)})
    finally:
        await admin.close()
    registry = CollectorRegistry()
    health = Health(liveness_timeout=10.0, probe_interval=0.5)
    monitor = ProgressMonitor(Idle.name, registry, health, interval=0.3)
    engine = _engine(Idle(), settings, kafka_bootstrap, database_url, monitor)
    running = asyncio.create_task(run_with_health(health, engine.run()))
    try:

        async def measured() -> bool:
            return _value(registry, "spectral_consumer_lag", 0) is not None

        await eventually(measured, timeout=60)
        await asyncio.sleep(1)  # a few more measurements
        assert _value(registry, "spectral_consumer_lag", 0) == 0
    finally:
        engine.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(running, timeout=30)
