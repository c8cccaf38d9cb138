"""aiokafka against the suite's broker: every Kafka API the product relies on.

Kafka 4.0 removed old protocol versions (KIP-896); these tests pin down that aiokafka still
speaks to the broker for each thing spectral does: produce, consume in a group with manual
commits, read committed offsets back, create topics, look offsets up by timestamp, and produce
idempotently with acks=all.
"""

from __future__ import annotations

import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import OffsetAndMetadata

from tests.support import eventually

pytestmark = pytest.mark.integration


async def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])

        # CreateTopics answers once the controller has committed the topic; the broker's own
        # metadata cache catches up a moment later.
        async def described() -> bool:
            (topic_info,) = await admin.describe_topics([topic])
            return len(topic_info["partitions"]) == partitions

        await eventually(described, timeout=10.0, interval=0.05)
    finally:
        await admin.close()


async def test_admin_creates_topics(kafka_bootstrap: str, topic_prefix: str) -> None:
    await _create(kafka_bootstrap, f"{topic_prefix}created", 4)


async def test_idempotent_produce_and_group_consume_with_manual_commit(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}events"
    await _create(kafka_bootstrap, topic, 3)
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, enable_idempotence=True, acks="all"
    )
    await producer.start()
    try:
        sent = [
            await producer.send_and_wait(topic, f"v{i}".encode(), key=f"k{i}".encode())
            for i in range(30)
        ]
    finally:
        await producer.stop()
    assert {meta.partition for meta in sent} <= {0, 1, 2}

    group = f"{topic_prefix}group"
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=kafka_bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        seen: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(seen) < 30 and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            for records in batches.values():
                seen.extend(record.value for record in records)
        assert sorted(seen) == sorted(f"v{i}".encode() for i in range(30))
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(3)])
        await consumer.commit({tp: OffsetAndMetadata(end, "") for tp, end in ends.items()})
        for tp, end in ends.items():
            assert await consumer.committed(tp) == end
    finally:
        await consumer.stop()


async def test_offsets_for_times(kafka_bootstrap: str, topic_prefix: str) -> None:
    topic = f"{topic_prefix}times"
    await _create(kafka_bootstrap, topic, 1)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        for i, stamp in enumerate((1_000_000, 2_000_000, 3_000_000)):
            await producer.send_and_wait(topic, str(i).encode(), partition=0, timestamp_ms=stamp)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        found = await consumer.offsets_for_times({tp: 1_500_000})
        assert found[tp] is not None
        assert (found[tp].offset, found[tp].timestamp) == (1, 2_000_000)
        assert (await consumer.offsets_for_times({tp: 9_000_000}))[tp] is None
        assert await consumer.beginning_offsets([tp]) == {tp: 0}
        assert await consumer.end_offsets([tp]) == {tp: 3}
    finally:
        await consumer.stop()


async def test_producing_to_an_unknown_topic_creates_it(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}auto"
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        meta = await producer.send_and_wait(topic, b"x", key=b"k")
        partitions = producer.client.cluster.partitions_for_topic(topic)
    finally:
        await producer.stop()
    assert meta.offset == 0
    assert partitions  # num.partitions of the broker: 3 on the local stack
