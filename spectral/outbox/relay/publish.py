"""How the relay hands a batch of records to Kafka, per client library.

A :class:`Publisher` takes a batch's records (each ``(topic, key, value, headers)``) and returns
each record's outcome — the future of its acknowledgement, the exception that refused it before
it was sent (too large: :func:`spectral.faults.refusal_of` names it), or None when it was not
sent — and the fault that stopped the sending, if any.

* aiokafka (:class:`BatchPublisher`): the records are appended to one record batch per topic
  partition (the partition is the one aiokafka's default partitioner would give the key, see
  :class:`KeyPartitioner`) and each batch is handed to the producer whole: one future per
  partition, no per-record call into the client. The idempotent producer gives each batch its
  sequence number as it does its own batches, and sends at most one batch per partition at a
  time, so a key's records keep their order across batches and retries.
* confluent (:class:`RecordPublisher`): librdkafka builds its batches in C; its records are
  queued one by one (:class:`~spectral.kafka.confluent.ConfluentPublisher`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, MessageSizeTooLargeError
from aiokafka.partitioner import DefaultPartitioner, murmur2
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from spectral.errors import SpectralError
from spectral.faults import refusal_of

Outgoing = tuple[str, bytes, bytes, list[tuple[str, bytes]]]
"""One record to send: topic, key, value, headers."""

Outcome = asyncio.Future[Any] | BaseException | None
"""A record's send: the future of its acknowledgement (shared by the records of one batch), the
refusal that kept it from being sent, or None (not sent)."""


class Publisher(Protocol):
    """What the relay needs of a Kafka client: start, publish a batch, stop."""

    async def start(self) -> None: ...

    async def publish(
        self, records: Sequence[Outgoing]
    ) -> tuple[list[Outcome], BaseException | None]:
        """Send ``records``: each one's outcome (as many as ``records``), and the fault that
        stopped the sending (the records it left unsent have None). A record refused before
        it was sent (too large) has its refusal as outcome; the others are sent."""
        ...

    async def stop(self) -> None: ...


class _RecordSender(Protocol):
    """A client that queues one record at a time (the confluent transport's publisher):
    ``send`` returns the future of its acknowledgement, or raises when the record is refused
    before it is sent."""

    async def start(self) -> None: ...

    def send(
        self, topic: str, *, value: bytes, key: bytes | None, headers: list[tuple[str, bytes]]
    ) -> Awaitable[asyncio.Future[Any]]: ...

    async def stop(self) -> None: ...


class RecordPublisher:
    """A batch sent record by record, in order; a fault stops the sending."""

    def __init__(self, producer: _RecordSender) -> None:
        self._producer = producer

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    async def publish(
        self, records: Sequence[Outgoing]
    ) -> tuple[list[Outcome], BaseException | None]:
        outcomes: list[Outcome] = [None] * len(records)
        for at, (topic, key, value, headers) in enumerate(records):
            try:
                outcomes[at] = await self._producer.send(
                    topic, value=value, key=key, headers=headers
                )
            except (KafkaError, SpectralError) as exc:
                if refusal_of(exc) is None:
                    return outcomes, exc
                outcomes[at] = exc
        return outcomes, None


class KeyPartitioner:
    """aiokafka's default partitioner — murmur2 of the key, as the Java client and librdkafka's
    ``murmur2_random`` compute it, so a key lands on the same partition whichever client sent
    it — with each key's hash remembered: the relay sends the same keys again and again, and
    aiokafka's pure-Python murmur2 costs ~5 us a record. At most ``size`` keys are remembered
    (then the memory starts afresh)."""

    def __init__(self, size: int = 65_536) -> None:
        self._size = size
        self._hashes: dict[bytes, int] = {}
        self._default = DefaultPartitioner()

    def __call__(self, key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
        if key is None:
            return int(self._default(key, all_partitions, available))
        hashed = self._hashes.get(key)
        if hashed is None:
            if len(self._hashes) >= self._size:
                self._hashes.clear()
            hashed = self._hashes[key] = murmur2(key) & 0x7FFFFFFF
        return all_partitions[hashed % len(all_partitions)]


class BatchPublisher:
    """A batch as one record batch per topic partition, each handed to aiokafka whole
    (``create_batch`` / ``send_batch``): the client's per-record work — a call, a partition
    lookup, a future and its result per record — is done once per partition.

    What aiokafka's ``send`` checks per record is kept: a record larger than
    ``max_request_bytes`` once encoded is refused (``MessageSizeTooLargeError``) and the
    others are sent; a topic missing from the cluster's metadata stops the sending there. A
    partition's records beyond ``max_batch_bytes`` go in a further batch of that partition,
    sent after the first (the client never has two batches of a partition in flight)."""

    def __init__(
        self, producer: AIOKafkaProducer, partitioner: KeyPartitioner, max_request_bytes: int
    ) -> None:
        self._producer = producer
        self._partitioner = partitioner
        self._max_request_bytes = max_request_bytes

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    async def publish(
        self, records: Sequence[Outgoing]
    ) -> tuple[list[Outcome], BaseException | None]:
        producer = self._producer
        partitioner = self._partitioner
        limit = self._max_request_bytes
        estimate = DefaultRecordBatchBuilder.estimate_size_in_bytes
        partitions: dict[str, list[int] | BaseException] = {}
        """Each topic's partitions, or its refusal (a topic the relay may not write)."""
        open_batches: dict[tuple[str, int], Any] = {}
        batches: list[tuple[str, int, Any]] = []
        """Every batch built, in the order each was opened (a partition's in its order)."""
        into: list[Any] = [None] * len(records)
        """Each record's batch, or its refusal."""
        failure: BaseException | None = None
        for at, (topic, key, value, headers) in enumerate(records):
            known = partitions.get(topic)
            if known is None:
                try:
                    known = partitions[topic] = sorted(await producer.partitions_for(topic))
                except KafkaError as exc:
                    if refusal_of(exc) is None:  # not in the metadata within the timeout
                        failure = exc
                        break
                    known = partitions[topic] = exc
            if isinstance(known, BaseException):
                into[at] = known
                continue
            if len(value) + len(key) > limit - 1024 and estimate(key, value, headers) > limit:
                into[at] = MessageSizeTooLargeError(
                    f"the record is {estimate(key, value, headers)} bytes when serialized, "
                    f"more than the producer's limit of {limit}"
                )
                continue
            tp = (topic, partitioner(key, known, known))
            batch = open_batches.get(tp)
            if (
                batch is None
                or batch.append(timestamp=None, key=key, value=value, headers=headers) is None
            ):
                batch = open_batches[tp] = producer.create_batch()
                batches.append((tp[0], tp[1], batch))
                batch.append(timestamp=None, key=key, value=value, headers=headers)
            into[at] = batch
        acks: dict[Any, asyncio.Future[Any]] = {}
        for topic, partition, batch in batches:
            try:
                acks[batch] = await producer.send_batch(batch, topic, partition=partition)
            except KafkaError as exc:  # closed, or its queue full past the request timeout
                failure = failure or exc
                break  # a partition's later batch never goes before its earlier one
        outcomes: list[Outcome] = [
            target if isinstance(target, BaseException) else acks.get(target) for target in into
        ]
        return outcomes, failure
