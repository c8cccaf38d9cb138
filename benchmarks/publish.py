"""Fill a topic with records as fast as the client allows (acks=all, idempotent producer)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from benchmarks.dataset import Record

_IN_FLIGHT = 5_000


@dataclass(frozen=True)
class Published:
    records: int
    seconds: float
    end_offsets: dict[int, int]


async def publish(
    bootstrap: str, topic: str, partitions: int, records: Iterable[Record]
) -> Published:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=20,
        max_batch_size=1024 * 1024,
        max_request_size=8 * 1024 * 1024,
    )
    await producer.start()
    started = time.perf_counter()
    count = 0
    try:
        pending: list[asyncio.Future[object]] = []
        for record in records:
            pending.append(await producer.send(topic, value=record.value, key=record.key))
            count += 1
            if len(pending) >= _IN_FLIGHT:
                await asyncio.gather(*pending)
                pending = []
        await asyncio.gather(*pending)
        await producer.flush()
    finally:
        await producer.stop()
    seconds = time.perf_counter() - started
    return Published(count, seconds, await end_offsets(bootstrap, topic, partitions))


async def publish_pairs(
    bootstrap: str, topic: str, pairs: Iterable[tuple[bytes | None, bytes]]
) -> None:
    """Publish (key, value) pairs in order (acks=all)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        futures = [await producer.send(topic, value=value, key=key) for key, value in pairs]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = await consumer.end_offsets(tps)
        return {tp.partition: int(offset) for tp, offset in ends.items()}
    finally:
        await consumer.stop()
