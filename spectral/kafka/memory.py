"""An in-memory Kafka for tests: topics, partitions, consumer groups and their offsets in one
process, behind the same transport seam as the real clients (spectral.kafka.transport).

:class:`MemoryBroker` holds the records; :class:`MemoryTransport` builds its record sources and
senders. A consumer run on it goes through everything a run on Kafka goes through — decode,
dedup, the handler, the dead letters with their fallbacks, the offset commit — without a broker
(PostgreSQL is still real: the effects are the handler's). FastStream's ``TestKafkaBroker`` is
the anchor: a test mode that swaps the transport and nothing else.

What it models, so a test can rely on it:

* a record's partition is chosen by its key (the same key, the same partition, in order), or
  given; offsets count from 0 per partition;
* a consumer group spreads the partitions of its members' topics over them, round robin in
  sorted order, again whenever a member joins or leaves; a rebalance is incremental (only the
  partitions that move are revoked: the owner is told, and waits for its batches in flight,
  before the new owner gets them) and happens in the members' ``fetch``;
* a partition a member gets starts at the group's committed offset (else the first record, or
  the end with ``auto_offset_reset="latest"``); a commit of a partition the member does not own
  is refused (none committed);
* the broker refuses a record larger than ``max_message_bytes`` (a dead letter then falls back
  to its reference, then to the table, as it does on Kafka);
* ``broker.reachable = False`` is an outage: fetches return nothing, commits, sends and probes
  raise :class:`~spectral.errors.TransientError` until it is set back.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import zlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from spectral.errors import TransientError
from spectral.kafka.produce import Message, Outcome, Refused, Sender, Sent
from spectral.kafka.transport import (
    FetchOptions,
    FixedRange,
    Reading,
    Rebalance,
    Record,
    RecordSource,
    Subscription,
    TopicPartition,
    offsets_after,
)
from spectral.observability.logging import get_logger

log = get_logger(__name__)

DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024 + 12
"""Kafka's default ``max.message.bytes`` (1 MiB plus the record batch overhead)."""


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """A record as a source hands it over (the fields of aiokafka's ``ConsumerRecord``)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...]

    def size(self) -> int:
        """Bytes the broker counts against ``max_message_bytes``."""
        headers = sum(len(k.encode()) + len(v or b"") for k, v in self.headers)
        return len(self.key or b"") + len(self.value or b"") + headers


@dataclass
class _Group:
    members: list[MemorySource] = field(default_factory=list)
    committed: dict[TopicPartition, int] = field(default_factory=dict)
    owners: dict[TopicPartition, MemorySource] = field(default_factory=dict)


class MemoryBroker:
    """Topics of partitions of records, and consumer groups, in memory (see the module)."""

    def __init__(
        self,
        *,
        partitions: int = 1,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        """``partitions``: of a topic created by its first record (auto-creation)."""
        self.default_partitions = partitions
        self.max_message_bytes = max_message_bytes
        self.reachable = True
        self._topics: dict[str, list[list[MemoryRecord]]] = {}
        self._groups: dict[str, _Group] = {}
        self._arrived = asyncio.Event()

    # -- topics -----------------------------------------------------------------------------

    def create_topic(self, topic: str, partitions: int | None = None) -> None:
        """Create ``topic`` (nothing if it exists)."""
        if topic not in self._topics:
            count = partitions or self.default_partitions
            self._topics[topic] = [[] for _ in range(count)]
            for group in self._groups.values():
                if any(topic in m.topics for m in group.members):
                    group.owners.clear()  # a new partition: the group's members share it out
                    _spread(group)

    def topics(self) -> list[str]:
        return sorted(self._topics)

    def partitions(self, topic: str) -> int:
        return len(self._topics.get(topic, ()))

    def records(self, topic: str) -> list[MemoryRecord]:
        """Every record of ``topic``, partition by partition, in offset order."""
        return [record for partition in self._topics.get(topic, []) for record in partition]

    def append(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> MemoryRecord:
        """Write one record (the topic is created if missing); refused when too large."""
        self._reachable()
        self.create_topic(topic)
        partitions = self._topics[topic]
        if partition is None:
            partition = _partition_of(key, len(partitions))
        if not 0 <= partition < len(partitions):
            msg = f"{topic} has no partition {partition}"
            raise ValueError(msg)
        log_ = partitions[partition]
        record = MemoryRecord(
            topic,
            partition,
            len(log_),
            key,
            value,
            timestamp if timestamp is not None else int(time.time() * 1000),
            tuple(headers),
        )
        if record.size() > self.max_message_bytes:
            msg = (
                f"MessageSizeTooLargeError: the record is {record.size()} bytes, more than "
                f"max.message.bytes ({self.max_message_bytes})"
            )
            raise _RefusedError(msg)
        log_.append(record)
        self._notify()
        return record

    def end_offset(self, tp: TopicPartition) -> int:
        partitions = self._topics.get(tp.topic, [])
        return len(partitions[tp.partition]) if tp.partition < len(partitions) else 0

    def _read(self, tp: TopicPartition, start: int, count: int) -> list[MemoryRecord]:
        partitions = self._topics.get(tp.topic, [])
        if tp.partition >= len(partitions):
            return []
        return partitions[tp.partition][start : start + count]

    def _notify(self) -> None:
        """Wake every fetch waiting for a record or a rebalance."""
        arrived, self._arrived = self._arrived, asyncio.Event()
        arrived.set()

    async def _wait(self, seconds: float) -> None:
        """Until a record arrives or a member joins or leaves, at most ``seconds``."""
        arrived = self._arrived
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await arrived.wait()

    def _reachable(self) -> None:
        if not self.reachable:
            msg = "the in-memory broker is unreachable (broker.reachable is False)"
            raise TransientError(msg)

    # -- groups -----------------------------------------------------------------------------

    def committed(self, group: str) -> dict[TopicPartition, int]:
        """The offsets ``group`` committed."""
        return dict(self._groups.get(group, _Group()).committed)

    def members(self, group: str) -> int:
        return len(self._groups.get(group, _Group()).members)

    def _group(self, name: str) -> _Group:
        return self._groups.setdefault(name, _Group())

    def _join(self, name: str, member: MemorySource) -> None:
        group = self._group(name)
        group.members.append(member)
        _spread(group)
        self._notify()

    def _leave(self, name: str, member: MemorySource) -> None:
        group = self._group(name)
        if member in group.members:
            group.members.remove(member)
        for tp in [tp for tp, owner in group.owners.items() if owner is member]:
            del group.owners[tp]
        _spread(group)
        self._notify()


class _RefusedError(Exception):
    """The broker refuses this record for good."""


def _partition_of(key: bytes | None, partitions: int) -> int:
    """The same key, the same partition; a record without a key goes to partition 0."""
    return zlib.crc32(key) % partitions if key else 0


def _spread(group: _Group) -> None:
    """Each member's target share: its topics' partitions round robin, in sorted order."""
    for member in group.members:
        member.target = set()
    by_topic: dict[str, list[MemorySource]] = {}
    for member in group.members:
        for topic in member.topics:
            by_topic.setdefault(topic, []).append(member)
    everything = sorted(
        TopicPartition(topic, p)
        for topic, members in by_topic.items()
        for p in range(members[0].broker.partitions(topic))
    )
    for index, tp in enumerate(everything):
        members = by_topic[tp.topic]
        members[index % len(members)].target.add(tp)


class MemorySource(RecordSource):
    """A :class:`~spectral.kafka.transport.RecordSource` on a :class:`MemoryBroker`."""

    def __init__(self, broker: MemoryBroker, reading: Reading, options: FetchOptions) -> None:
        super().__init__(reading)
        self.broker = broker
        self.topics: tuple[str, ...] = ()
        self.target: set[TopicPartition] = set()
        """The partitions the group means this member to have (it takes them in ``fetch``)."""
        self._options = options
        self._owned: set[TopicPartition] = set()
        self._positions: dict[TopicPartition, int] = {}
        self._rebalance: Rebalance | None = None
        self._started = False
        self._joined = False
        """The engine was told of its first assignment (possibly none)."""

    async def start(self, topics: Sequence[str], rebalance: Rebalance) -> None:
        if self._started:
            return
        self.broker._reachable()  # noqa: SLF001 - the broker's own check
        reading = self.reading
        self._rebalance = rebalance
        if isinstance(reading, Subscription):
            self.topics = tuple(topics)
            for topic in topics:
                self.broker.create_topic(topic)
            self.broker._join(reading.group, self)  # noqa: SLF001 - membership is the broker's
        else:
            self._owned = reading.remaining()
            self._positions = {tp: reading.start[tp] for tp in self._owned}
        self._started = True

    async def _follow(self) -> None:
        """Take part in a rebalance: give up what the group moved away (after telling the
        engine), then take what it moved here."""
        reading = self.reading
        if not isinstance(reading, Subscription) or self._rebalance is None:
            return
        group = self.broker._group(reading.group)  # noqa: SLF001 - membership is the broker's
        leaving = self._owned - self.target
        if leaving:
            await self._rebalance.revoking(leaving)
            self._owned -= leaving
            for tp in leaving:
                self._positions.pop(tp, None)
                if group.owners.get(tp) is self:
                    del group.owners[tp]
            log.info("partitions revoked", partitions=self.names(leaving))
        arriving = {tp for tp in self.target - self._owned if tp not in group.owners}
        if arriving or not self._joined:
            self._joined = True
            for tp in arriving:
                group.owners[tp] = self
                self._positions[tp] = self._start_of(group, tp, reading)
            self._owned |= arriving
            self._rebalance.assigned(arriving)
            if arriving:
                log.info("partitions assigned", partitions=self.names(arriving))

    def _start_of(self, group: _Group, tp: TopicPartition, reading: Subscription) -> int:
        if tp in group.committed:
            return group.committed[tp]
        return self.broker.end_offset(tp) if reading.auto_offset_reset == "latest" else 0

    async def fetch(self, timeout_ms: int) -> Sequence[Record]:
        if not self.broker.reachable:
            log.warning("fetch failed; retrying", error="the in-memory broker is unreachable")
            await asyncio.sleep(timeout_ms / 1000)
            return []
        await self._follow()
        records = self._take()
        if not records:
            await self.broker._wait(timeout_ms / 1000)  # noqa: SLF001 - the broker's condition
            await self._follow()
            records = self._take()
        return records

    def _take(self) -> list[MemoryRecord]:
        room = self._options.max_records
        out: list[MemoryRecord] = []
        end = self.reading.end if isinstance(self.reading, FixedRange) else None
        for tp in sorted(self._owned):
            if room <= 0:
                break
            position = self._positions[tp]
            stop = end[tp] if end is not None else self.broker.end_offset(tp)
            taken = self.broker._read(tp, position, min(room, stop - position))  # noqa: SLF001
            if taken:
                out.extend(taken)
                self._positions[tp] = taken[-1].offset + 1
                room -= len(taken)
        return out

    async def finished(self) -> bool:
        reading = self.reading
        if not isinstance(reading, FixedRange):
            return False
        return all(self._positions[tp] >= reading.end[tp] for tp in self._owned)

    async def commit(self, records: Sequence[Record]) -> Mapping[TopicPartition, int]:
        reading = self.reading
        if not isinstance(reading, Subscription):
            return {}
        self.broker._reachable()  # noqa: SLF001 - the broker's own check
        group = self.broker._group(reading.group)  # noqa: SLF001 - membership is the broker's
        owned = {
            tp: offset
            for tp, offset in offsets_after(records).items()
            if group.owners.get(tp) is self
        }
        group.committed.update(owned)
        return owned

    def assignment(self) -> frozenset[TopicPartition]:
        return frozenset(self._owned)

    async def end_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int]:
        self.broker._reachable()  # noqa: SLF001 - the broker's own check
        return {tp: self.broker.end_offset(tp) for tp in partitions}

    async def beginning_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int]:
        self.broker._reachable()  # noqa: SLF001 - the broker's own check
        return dict.fromkeys(partitions, 0)

    async def committed(self, partition: TopicPartition) -> int | None:
        reading = self.reading
        if not isinstance(reading, Subscription):
            return None
        self.broker._reachable()  # noqa: SLF001 - the broker's own check
        return self.broker.committed(reading.group).get(partition)

    async def probe(self) -> None:
        self.broker._reachable()  # noqa: SLF001 - the broker's own check

    async def stop(self) -> None:
        if self._started and isinstance(self.reading, Subscription):
            self.broker._leave(self.reading.group, self)  # noqa: SLF001 - the broker's
        self._owned.clear()
        self._positions.clear()
        self._started = self._joined = False


class MemorySender:
    """A :class:`~spectral.kafka.produce.Sender` writing to a :class:`MemoryBroker`."""

    def __init__(self, broker: MemoryBroker) -> None:
        self.broker = broker

    async def start(self) -> None:
        self.broker._reachable()  # noqa: SLF001 - the broker's own check

    async def send_each(self, messages: Sequence[Message]) -> list[Outcome]:
        self.broker._reachable()  # noqa: SLF001 - the broker's own check
        out: list[Outcome] = []
        for message in messages:
            try:
                record = self.broker.append(
                    message.topic, message.value, key=message.key, headers=message.headers
                )
            except _RefusedError as exc:
                out.append(Refused(str(exc)))
                continue
            out.append(Sent(record.partition, record.offset))
        return out

    async def send_alone(self, message: Message) -> Outcome:
        return (await self.send_each([message]))[0]

    async def stop(self) -> None:
        return


class MemoryTransport:
    """The :class:`~spectral.kafka.transport.Transport` of a :class:`MemoryBroker`."""

    name = "memory"

    def __init__(self, broker: MemoryBroker | None = None) -> None:
        self.broker = broker or MemoryBroker()

    def source(self, reading: Reading, options: FetchOptions) -> RecordSource:
        return MemorySource(self.broker, reading, options)

    def sender(
        self,
        topics: Sequence[str],  # noqa: ARG002 - nothing to track
        *,
        delivery_timeout_ms: int | None = None,  # noqa: ARG002 - every record is taken at once
    ) -> Sender:
        return MemorySender(self.broker)
