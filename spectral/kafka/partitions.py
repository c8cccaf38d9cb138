"""What the broker says about topics' partitions: which exist, their first and end offsets, the
offsets of timestamps. Used by replay, offsets reset and the dead-letter tools."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TypeAlias

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from spectral.errors import TransientError
from spectral.kafka.config import client_kwargs
from spectral.settings import Settings

TopicPartitionKey: TypeAlias = tuple[str, int]
"""(topic, partition); aiokafka's TopicPartition is a named tuple equal to it."""


@dataclass(frozen=True, slots=True)
class Watermarks:
    """What the broker says about some partitions at one moment."""

    beginning: Mapping[TopicPartitionKey, int]
    end: Mapping[TopicPartitionKey, int]
    # offset of the first record at or after the start / stop timestamp; None = no such record
    at_start_time: Mapping[TopicPartitionKey, int | None]
    at_stop_time: Mapping[TopicPartitionKey, int | None]


@asynccontextmanager
async def standalone_consumer(
    settings: Settings, bootstrap: str, **options: object
) -> AsyncIterator[AIOKafkaConsumer]:
    """A started consumer outside any group (no commits), stopped on exit."""
    consumer = AIOKafkaConsumer(
        **client_kwargs(settings, bootstrap),
        enable_auto_commit=False,
        isolation_level="read_committed",
        **options,
    )
    try:
        await consumer.start()
    except KafkaError as exc:
        raise TransientError(f"Kafka unavailable: {exc}") from exc
    try:
        yield consumer
    finally:
        with contextlib.suppress(KafkaError):
            await stop_consumer(consumer)


_STOPPING: set[asyncio.Task[None]] = set()
"""Stops under way whose callers were cancelled: referenced until they end."""


async def stop_consumer(consumer: AIOKafkaConsumer) -> None:
    """Stop ``consumer`` whole: its fetcher, its connections and its metadata task with it.

    aiokafka's ``stop`` marks the consumer closed first, then closes the coordinator, the
    fetcher and the client: interrupted anywhere, a second ``stop`` returns at once and what it
    had not closed yet goes on fetching and refreshing metadata in the caller's process. So:

    * the stop runs in a task of its own, shielded from the caller's cancellation (a task
      cancelled while it stops a consumer, by a timeout or a second signal, raises
      CancelledError at once as ever, and the consumer still stops whole);
    * aiokafka 0.14's group-less coordinator starts a task when the consumer starts and cancels
      it on stop; a task cancelled before it first ran makes ``stop`` raise CancelledError
      before it closes the fetcher and the client. One turn of the loop lets that task begin
      (it has been queued since the consumer started), and a task that has begun ends quietly
      when cancelled; should one still raise, what ``stop`` skipped is closed here."""
    stopping = asyncio.create_task(_stop_whole(consumer))
    _STOPPING.add(stopping)
    stopping.add_done_callback(_STOPPING.discard)
    await asyncio.shield(stopping)


async def _stop_whole(consumer: AIOKafkaConsumer) -> None:
    await asyncio.sleep(0)
    try:
        await consumer.stop()
    except asyncio.CancelledError:
        # The coordinator's task (nothing else cancels this one but the loop's shutdown):
        # ``stop`` skipped the fetcher and the client. Each closes again harmlessly.
        fetcher = consumer._fetcher  # noqa: SLF001 - what aiokafka's stop skipped
        if fetcher is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await fetcher.close()
        with contextlib.suppress(asyncio.CancelledError):
            await consumer._client.close()  # noqa: SLF001 - what aiokafka's stop skipped


@asynccontextmanager
async def admin_client(
    settings: Settings, bootstrap: str, failure: str
) -> AsyncIterator[AIOKafkaAdminClient]:
    """A started admin client, closed on exit; a Kafka error in the block is raised as a
    TransientError ``"{failure}: {error}"``."""
    admin = AIOKafkaAdminClient(**client_kwargs(settings, bootstrap))
    try:
        await admin.start()
        yield admin
    except KafkaError as exc:
        raise TransientError(f"{failure}: {exc}") from exc
    finally:
        with contextlib.suppress(Exception):
            await admin.close()


async def topic_partitions(
    settings: Settings, bootstrap: str, topics: Sequence[str]
) -> list[TopicPartitionKey]:
    """(topic, partition) of every partition of ``topics``; a missing topic has none (and is
    not created: only topics that ``list_topics`` shows are named in a metadata request, which
    would create a missing one on a broker that auto-creates topics)."""
    async with admin_client(settings, bootstrap, "Kafka unavailable") as admin:
        present = sorted(set(topics) & set(await admin.list_topics()))
        described = await admin.describe_topics(present) if present else []
    found: list[TopicPartitionKey] = []
    for entry in described:
        if entry.get("error_code", 0) == 0 and entry.get("topic") in topics:
            found.extend((entry["topic"], p["partition"]) for p in entry.get("partitions", []))
    return sorted(found)


async def fetch_watermarks(
    settings: Settings,
    bootstrap: str,
    partitions: Sequence[TopicPartitionKey],
    *,
    start_time: datetime | None = None,
    stop_time: datetime | None = None,
) -> Watermarks:
    """First and end offsets now, and the offsets of the given timestamps, per partition."""
    tps = [TopicPartition(topic, partition) for topic, partition in partitions]
    if not tps:
        return Watermarks({}, {}, {}, {})
    async with standalone_consumer(settings, bootstrap) as consumer:
        try:
            beginning = await consumer.beginning_offsets(tps)
            end = await consumer.end_offsets(tps)
            at_start = await _offsets_at(consumer, tps, start_time)
            at_stop = await _offsets_at(consumer, tps, stop_time)
        except KafkaError as exc:
            raise TransientError(f"Kafka unavailable: {exc}") from exc
    return Watermarks(
        beginning={(tp.topic, tp.partition): off for tp, off in beginning.items()},
        end={(tp.topic, tp.partition): off for tp, off in end.items()},
        at_start_time=at_start,
        at_stop_time=at_stop,
    )


async def _offsets_at(
    consumer: AIOKafkaConsumer, tps: list[TopicPartition], when: datetime | None
) -> dict[TopicPartitionKey, int | None]:
    if when is None:
        return {}
    millis = int(when.timestamp() * 1000)
    found = await consumer.offsets_for_times(dict.fromkeys(tps, millis))
    return {
        (tp.topic, tp.partition): (None if hit is None else hit.offset) for tp, hit in found.items()
    }
