"""Kafka helpers for integration tests: publish raw records, read a topic to its end."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from contracts import EventEnvelope, FailureRef, failure_cluster_detected_event
from spectral.kafka.partitions import stop_consumer
from spectral.settings import GroupProtocol, KafkaTransport
from tests.events import encode

TRANSPORTS: dict[str, dict[str, Any]] = {
    "aiokafka": {"kafka_transport": KafkaTransport.AIOKAFKA},
    "confluent-classic": {
        "kafka_transport": KafkaTransport.CONFLUENT,
        "kafka_group_protocol": GroupProtocol.CLASSIC,
    },
    "confluent-consumer": {
        "kafka_transport": KafkaTransport.CONFLUENT,
        "kafka_group_protocol": GroupProtocol.CONSUMER,
    },
}
"""Every Kafka transport and group protocol a deployment can choose: settings overrides."""

PRODUCING: tuple[str, ...] = ("aiokafka", "confluent-consumer")
"""One of ``TRANSPORTS`` per client library: what a producer (the relay, a redrive) does
depends on the client, not on the group protocol."""


def transport_params(
    *in_make_test: str, mark: pytest.MarkDecorator = pytest.mark.slow
) -> list[Any]:
    """Every name of ``TRANSPORTS`` as a pytest parameter; those not named in ``in_make_test``
    carry ``mark`` (``slow``: ``make test-slow``; ``cluster_slow``: ``make test-cluster``) — a
    heavy fault test runs its other variants there, while the ones named keep the guarantee in
    ``make test``."""
    return [
        pytest.param(name, id=name, marks=() if name in in_make_test else (mark,))
        for name in sorted(TRANSPORTS)
    ]


def transport_env(name: str) -> dict[str, str]:
    """``TRANSPORTS[name]`` as the environment of a ``spectral`` process."""
    return {f"SPECTRAL_{key.upper()}": str(value) for key, value in TRANSPORTS[name].items()}


async def partitions_of(bootstrap: str, topic: str) -> list[int]:
    """The partition numbers of ``topic`` ([] when it does not exist)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics([topic])
    finally:
        await admin.close()
    for entry in described:
        if entry.get("topic") == topic and entry.get("error_code", 0) == 0:
            return sorted(p["partition"] for p in entry.get("partitions", []))
    return []


@dataclass(frozen=True)
class ReadRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_ms: int = 0
    """The record's Kafka timestamp (its producer's create time, in ms since the epoch)."""

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key == name:
                return "" if value is None else value.decode("utf-8", "replace")
        return None


async def create_topics(
    bootstrap: str,
    names: Sequence[str],
    partitions: int = 1,
    configs: dict[str, str] | None = None,
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [
                NewTopic(
                    name, num_partitions=partitions, replication_factor=1, topic_configs=configs
                )
                for name in names
            ]
        )
    finally:
        await admin.close()


async def publish(
    bootstrap: str,
    topic: str,
    records: Sequence[tuple[bytes | None, bytes]],
    headers: Sequence[Sequence[tuple[str, bytes]]] | None = None,
) -> list[int]:
    """Publish (key, value) pairs in order (``headers``: each record's); returns their
    offsets."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        max_request_size=4 * 1024 * 1024,
    )
    await producer.start()
    try:
        offsets = []
        for index, (key, value) in enumerate(records):
            extra = list(headers[index]) if headers is not None else None
            meta = await producer.send_and_wait(topic, value=value, key=key, headers=extra)
            offsets.append(meta.offset)
        return offsets
    finally:
        await producer.stop()


async def publish_envelopes(
    bootstrap: str, topic: str, envelopes: Sequence[EventEnvelope[Any]]
) -> list[int]:
    pairs = [(str(e.payload.cluster_id).encode(), encode(e)) for e in envelopes]
    return await publish(bootstrap, topic, pairs)


async def read_all(bootstrap: str, topic: str, timeout: float = 10.0) -> list[ReadRecord]:
    """Every record of ``topic`` up to its current end (no consumer group)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = await partitions_of(bootstrap, topic)
        if not partitions:
            return []
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out: list[ReadRecord] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            positions = [await consumer.position(tp) for tp in tps]
            if all(pos >= ends[tp] for pos, tp in zip(positions, tps, strict=True)):
                break
            if loop.time() > deadline:
                raise AssertionError(f"could not read {topic} to its end in {timeout}s")
            batch = await consumer.getmany(timeout_ms=200)
            for records in batch.values():
                out.extend(
                    ReadRecord(
                        r.topic,
                        r.partition,
                        r.offset,
                        r.key,
                        r.value or b"",
                        tuple(r.headers),
                        r.timestamp,
                    )
                    for r in records
                )
        return out
    finally:
        await stop_consumer(consumer)


async def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int | None]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        partitions = await partitions_of(bootstrap, topic)
        return {p: await consumer.committed(TopicPartition(topic, p)) for p in partitions}
    finally:
        await stop_consumer(consumer)


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in await partitions_of(bootstrap, topic)]
        ends = await consumer.end_offsets(tps)
        return {tp.partition: off for tp, off in ends.items()}
    finally:
        await stop_consumer(consumer)


def cluster_event(
    cluster_id: uuid.UUID | None = None,
    *,
    failure_count: int = 3,
    last_observed_at: datetime | None = None,
    severity: str = "medium",
    stub: str | None = None,
    rule_id: uuid.UUID | None = None,
    workspace_id: uuid.UUID | None = None,
) -> EventEnvelope[Any]:
    """A valid failure-cluster snapshot built through the contracts helper."""
    last = last_observed_at or datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
    first = last - timedelta(hours=1)
    evidence = [
        FailureRef(
            failure_id=f"f-{i}",
            observed_at=first + timedelta(minutes=i),
            summary=f"rule failed on input {i}",
        )
        for i in range(min(failure_count, 10))
    ]
    return failure_cluster_detected_event(
        cluster_id=cluster_id or uuid.uuid4(),
        rule_id=rule_id or uuid.UUID(int=1),
        workspace_id=workspace_id or uuid.UUID(int=2),
        severity=severity,  # type: ignore[arg-type]
        failure_count=failure_count,
        first_observed_at=first,
        last_observed_at=last,
        evidence_bundle=evidence,
        suggested_rule_stub=stub,
    )
