"""Partitions added to a topic under a running consumer are read within seconds (the metadata
refresh, SPECTRAL_KAFKA_METADATA_REFRESH_SECONDS), not after Kafka's default five minutes."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions
from prometheus_client import CollectorRegistry

from contracts import FAILURE_CLUSTER_DETECTED
from spectral.engine.engine import ConsumerEngine, EngineOptions
from spectral.kafka.topics import dlq_topic, topic_for
from spectral.settings import Settings
from tests.events import encode
from tests.integration.engine.test_hostile_records import KeysHandler
from tests.kafka_support import cluster_event, create_topics
from tests.support import eventually

pytestmark = pytest.mark.integration


async def _publish(bootstrap: str, topic: str, partition: int, count: int) -> list[str]:
    events = [cluster_event() for _ in range(count)]
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        # A partition just added reaches the broker's metadata a moment after the admin call
        # returned; a send to it before then fails with "Unrecognized partition" (seen under
        # load), a race of this test's producer, not of the consumer under test.
        deadline = time.monotonic() + 30
        while partition not in await producer.partitions_for(topic):
            assert time.monotonic() < deadline, f"partition {partition} of {topic} never listed"
            await asyncio.sleep(0.1)
            await producer.client.force_metadata_update()
        for event in events:
            await producer.send_and_wait(
                topic,
                encode(event),
                key=str(event.payload.cluster_id).encode(),
                partition=partition,
            )
    finally:
        await producer.stop()
    return [e.idempotency_key for e in events]


async def test_a_partition_added_under_a_running_consumer_is_read_within_seconds(
    settings: Settings, kafka_bootstrap: str
) -> None:
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await create_topics(kafka_bootstrap, [topic, dlq_topic(topic)], partitions=1)
    handler = KeysHandler()
    assert settings.database_url is not None
    engine = ConsumerEngine(
        handler,
        settings,
        kafka_bootstrap=kafka_bootstrap,
        database_url=settings.database_url.get_secret_value(),
        options=EngineOptions(poll_timeout_ms=100),
        registry=CollectorRegistry(),
    )
    task = asyncio.create_task(engine.run())
    try:
        first = await _publish(kafka_bootstrap, topic, 0, 5)

        async def applied(keys: list[str]) -> bool:
            assert not task.done(), task
            return set(keys) <= set(handler.keys)

        await eventually(lambda: applied(first), timeout=60)

        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        await admin.start()
        try:
            await admin.create_partitions({topic: NewPartitions(total_count=3)})
        finally:
            await admin.close()
        added = time.monotonic()
        later = await _publish(kafka_bootstrap, topic, 1, 5)
        later += await _publish(kafka_bootstrap, topic, 2, 5)
        # The refresh is every 5 s; a rebalance follows. Far below Kafka's default 5 minutes.
        await eventually(lambda: applied(later), timeout=45)
        assert time.monotonic() - added < 45
    finally:
        engine.stop()
        await asyncio.wait_for(task, timeout=30)
