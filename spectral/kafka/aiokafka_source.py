"""The record source on aiokafka (the default transport, ``SPECTRAL_KAFKA_TRANSPORT=aiokafka``).

One :class:`AiokafkaSource` owns one ``AIOKafkaConsumer``; whether it subscribes (a group
member: the classic group protocol, every rebalance revokes every partition) or assigns (a
fixed range) is decided once, by its :class:`~spectral.kafka.transport.Reading`. The seam's rules
are in :mod:`spectral.kafka.transport`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from spectral.faults import Component, is_transient
from spectral.kafka.aiokafka_frames import install as install_frame_reader
from spectral.kafka.aiokafka_records import lean
from spectral.kafka.clients import ClientSource, ClientTransport
from spectral.kafka.config import client_kwargs
from spectral.kafka.groups import membership_lost
from spectral.kafka.partitions import stop_consumer
from spectral.kafka.produce import AiokafkaSender
from spectral.kafka.transport import (
    FetchOptions,
    FixedRange,
    Reading,
    Rebalance,
    Record,
    RecordSource,
    Subscription,
    UnreadableRecordsError,
    offsets_after,
)
from spectral.observability.logging import get_logger
from spectral.observability.outages import OUTAGES
from spectral.settings import Settings

log = get_logger(__name__)

FETCH_MAX_BYTES = 64 * 1024 * 1024
PARTITION_FETCH_BYTES = 1024 * 1024
"""Per partition and fetch (Kafka's default). The fetcher prefetches every assigned partition,
so this bounds what waits in memory: 8 MiB here kept ~70 MiB more resident on a 6-partition
topic for no throughput. A record batch larger than this is still returned whole."""
MAX_POLL_INTERVAL_MS = 600_000


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """aiokafka's rebalance callbacks, handed to the engine's :class:`Rebalance`."""

    def __init__(self, rebalance: Rebalance) -> None:
        self._rebalance = rebalance

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        if not revoked:
            return
        await self._rebalance.revoking(revoked)
        log.info("partitions revoked", partitions=RecordSource.names(revoked))

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        self._rebalance.assigned(assigned)
        if assigned:
            log.info("partitions assigned", partitions=RecordSource.names(assigned))


class AiokafkaSource(ClientSource):
    """A :class:`~spectral.kafka.transport.RecordSource` on one ``AIOKafkaConsumer``."""

    def __init__(
        self,
        settings: Settings,
        bootstrap: str,
        reading: Reading,
        options: FetchOptions | None = None,
    ) -> None:
        super().__init__(settings, bootstrap, reading, options)
        self._consumer: AIOKafkaConsumer | None = None

    def _client(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            reading = self.reading
            refresh_ms = int(self._settings.kafka_metadata_refresh_seconds * 1000)
            self._consumer = AIOKafkaConsumer(
                **client_kwargs(self._settings, self._bootstrap),
                group_id=self.group,
                client_id=self._options.client_id,
                enable_auto_commit=False,
                auto_offset_reset=(
                    reading.auto_offset_reset if isinstance(reading, Subscription) else "earliest"
                ),
                max_poll_records=self._options.max_records,
                fetch_max_bytes=FETCH_MAX_BYTES,
                max_partition_fetch_bytes=PARTITION_FETCH_BYTES,
                max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
                metadata_max_age_ms=refresh_ms,
                isolation_level="read_committed",
                **self._options.extra,
            )
        return self._consumer

    async def start(self, topics: Sequence[str], rebalance: Rebalance) -> None:
        if self._attached:
            return
        consumer = self._client()
        install_frame_reader()  # a fetch response read whole, not regrown (aiokafka_frames.py)
        await consumer.start()
        lean(consumer)  # getmany hands over light records (aiokafka_records.py)
        reading = self.reading
        if isinstance(reading, Subscription):
            consumer.subscribe(topics=list(topics), listener=_Listener(rebalance))
        else:
            consumer.assign(sorted(self._remaining))
            for tp in self._remaining:
                consumer.seek(tp, reading.start[tp])
        self._attached = True

    def _started(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            msg = "the source was not started"
            raise RuntimeError(msg)
        return self._consumer

    async def fetch(self, timeout_ms: int) -> Sequence[Record]:
        consumer = self._started()
        try:
            fetched = await consumer.getmany(
                timeout_ms=timeout_ms, max_records=self._options.max_records
            )
        except KafkaError as exc:
            if is_transient(exc):
                OUTAGES.failed(Component.KAFKA, exc, what="fetch")  # logged once an outage
                return []
            partitions = ", ".join(self.names(consumer.assignment())) or "none"
            raise UnreadableRecordsError(
                f"Kafka returned records this client cannot read ({type(exc).__name__}: {exc}) "
                f"while reading partitions {partitions}. Nothing after them was committed; a "
                "compressed batch needs the codec libraries installed, a corrupt one must be "
                "skipped by hand (spectral offsets reset --to-offset)"
            ) from exc
        records: list[Any] = [record for batch in fetched.values() for record in batch]
        reading = self.reading
        if isinstance(reading, FixedRange):
            end = reading.end
            return [r for r in records if r.offset < end[TopicPartition(r.topic, r.partition)]]
        return records

    async def finished(self) -> bool:
        """A range pauses the partitions that reached their end; True once none is left."""
        reading = self.reading
        if not isinstance(reading, FixedRange):
            return False
        consumer = self._started()
        for tp in list(self._remaining):
            if await consumer.position(tp) >= reading.end[tp]:
                self._remaining.discard(tp)
                with contextlib.suppress(IllegalStateError):
                    consumer.pause(tp)
        return not self._remaining

    async def commit(self, records: Sequence[Record]) -> Mapping[TopicPartition, int]:
        if not self.live:
            return {}
        consumer = self._started()
        assigned = consumer.assignment()
        owned = {tp: offset for tp, offset in offsets_after(records).items() if tp in assigned}
        if not owned:
            return {}
        if membership_lost(consumer):
            # The group moved on without this member (frozen past its session): the new owners
            # read from the committed offset, which a commit now could only move back.
            log.warning("offset commit skipped: the group membership was lost")
            return {}
        try:
            await consumer.commit(owned)
        except (CommitFailedError, IllegalStateError) as exc:
            # The partitions moved to another member mid-batch: it re-reads from the last
            # committed offset and finds these events deduplicated.
            log.warning("offset commit refused after a rebalance", error=str(exc))
            return {}
        return owned

    def assignment(self) -> frozenset[TopicPartition]:
        if self._consumer is None:
            return frozenset()
        return frozenset(self._consumer.assignment())

    async def end_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int]:
        if not partitions:
            return {}
        found = await self._started().end_offsets(list(partitions))
        return {TopicPartition(tp.topic, tp.partition): int(o) for tp, o in found.items()}

    async def beginning_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int]:
        if not partitions:
            return {}
        found = await self._started().beginning_offsets(list(partitions))
        return {TopicPartition(tp.topic, tp.partition): int(o) for tp, o in found.items()}

    async def committed(self, partition: TopicPartition) -> int | None:
        if not self.live:
            return None
        offset = await self._started().committed(partition)
        return int(offset) if offset is not None else None

    async def probe(self) -> None:
        consumer = self._started()
        assigned = list(consumer.assignment())
        # The end offsets of this member's own partitions: one request to their leaders.
        # ``topics()`` reads the metadata of every topic of the cluster (84 ms of CPU at 5,600
        # topics); it stays the probe of a member that holds no partition.
        if assigned:
            await consumer.end_offsets(assigned)
        else:
            await consumer.topics()

    async def stop(self) -> None:
        consumer, self._consumer = self._consumer, None
        self._attached = False
        if consumer is not None:
            await stop_consumer(consumer)  # leaves the group


class AiokafkaTransport(ClientTransport):
    """The aiokafka :class:`~spectral.kafka.transport.Transport` of one cluster."""

    name = "aiokafka"
    source_type = AiokafkaSource
    sender_type = AiokafkaSender
