"""Where a run's records come from: the choice between a live group member and a fixed range,
made once (FastStream's ``LogicSubscriber`` is the anchor).

:class:`GroupSource` (``spectral consume``): a member of the consumer group, subscribed to the
handler's topics; partitions move between members (a revoked partition's fetched records are
dropped before they are applied — the new owner reads them from the committed offset); offsets
are committed after each batch; it runs until stopped.

:class:`RangeSource` (replay, dry run, rebuild): fixed partitions read from ``start`` up to
``end`` (exclusive) outside any group — no membership, no commits; it finishes once every
partition's position reached its end.

A fetch that fails for good (a compressed batch the client cannot decode, a corrupt batch)
raises :class:`UnreadableRecordsError`: the process exits non-zero with the reason instead of
retrying forever (the records are still at their committed offset for the next start).
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from spectral.engine.retrying import Retrying
from spectral.errors import PermanentError
from spectral.faults import Component, is_transient
from spectral.kafka.groups import membership_lost
from spectral.observability.logging import get_logger
from spectral.observability.outages import OUTAGES

log = get_logger(__name__)

Moved = Callable[[list[TopicPartition]], None]


class UnreadableRecordsError(PermanentError):
    """Kafka returned records this client cannot read; retrying cannot help."""


def _names(partitions: Sequence[TopicPartition]) -> list[str]:
    return [f"{tp.topic}:{tp.partition}" for tp in partitions]


class RecordSource(ABC):
    """How a run reads its records (see the module docstring)."""

    live: bool
    """A member of a live consumer group: the handler's ``start`` and ``periodic`` run."""
    epoch: int = 0
    """Advances whenever partitions are revoked: records fetched in an earlier epoch are not
    applied (their partitions' new owner — maybe this member again — reads them from the
    committed offset; committing them now could move that offset back)."""

    @abstractmethod
    def group_id(self, consumer: str) -> str | None:
        """The Kafka group the client joins (None: none)."""

    @abstractmethod
    async def attach(self, consumer: AIOKafkaConsumer, topics: Sequence[str]) -> None:
        """Subscribe or assign, once the client started."""

    async def fetch(
        self, consumer: AIOKafkaConsumer, timeout_ms: int, max_records: int
    ) -> list[Any]:
        """The next records, possibly none."""
        try:
            fetched = await consumer.getmany(timeout_ms=timeout_ms, max_records=max_records)
        except KafkaError as exc:
            if is_transient(exc):
                OUTAGES.failed(Component.KAFKA, exc, what="fetch")
                return []
            partitions = ", ".join(_names(sorted(consumer.assignment()))) or "none"
            raise UnreadableRecordsError(
                f"Kafka returned records this client cannot read ({type(exc).__name__}: {exc}) "
                f"while reading partitions {partitions}. Nothing after them was committed; a "
                "compressed batch needs the codec libraries installed, a corrupt one must be "
                "skipped by hand (spectral offsets reset --to-offset)"
            ) from exc
        return [record for batch in fetched.values() for record in batch]

    async def finished(self, consumer: AIOKafkaConsumer) -> bool:  # noqa: ARG002
        """True once there is nothing left to read (never, for a live member)."""
        return False

    async def commit(
        self,
        consumer: AIOKafkaConsumer,  # noqa: ARG002
        records: Sequence[Any],  # noqa: ARG002
        retrying: Retrying,  # noqa: ARG002
    ) -> Mapping[TopicPartition, int]:
        """Commit past ``records``; the offsets committed per partition."""
        return {}


class _Revocations(ConsumerRebalanceListener):  # type: ignore[misc]
    """Before partitions move, wait for the batch whose transaction is running and for every
    batch whose transaction committed to commit its offsets (while this member still owns the
    partitions), then start a new epoch: the batches fetched before are dropped."""

    def __init__(self, source: GroupSource) -> None:
        self._source = source

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        if not revoked:
            return
        async with self._source.batch_lock:
            await self._source.acknowledged()
            self._source.epoch += 1
            self._source.revoked(revoked)
        log.info("partitions revoked", partitions=_names(revoked))

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        self._source.assigned(assigned)
        if assigned:
            log.info("partitions assigned", partitions=_names(assigned))


class GroupSource(RecordSource):
    """A member of consumer group ``group``."""

    live = True

    def __init__(
        self,
        group: str,
        batch_lock: asyncio.Lock,
        *,
        revoked: Moved,
        assigned: Moved,
        acknowledged: Callable[[], Awaitable[None]],
    ) -> None:
        """``batch_lock`` is held while a batch's transaction runs; ``acknowledged`` waits
        (under that lock) until every batch whose transaction committed has committed its
        offsets; ``revoked`` is told which partitions left (under that lock), ``assigned``
        which arrived (possibly none)."""
        self.group = group
        self.batch_lock = batch_lock
        self.acknowledged = acknowledged
        self.revoked = revoked
        self.assigned = assigned

    def group_id(self, consumer: str) -> str | None:  # noqa: ARG002 - named at construction
        return self.group

    async def attach(self, consumer: AIOKafkaConsumer, topics: Sequence[str]) -> None:
        consumer.subscribe(topics=list(topics), listener=_Revocations(self))

    async def commit(
        self, consumer: AIOKafkaConsumer, records: Sequence[Any], retrying: Retrying
    ) -> Mapping[TopicPartition, int]:
        ends: dict[tuple[str, int], int] = {}
        for record in records:
            where = (record.topic, record.partition)
            if record.offset >= ends.get(where, -1):
                ends[where] = record.offset + 1
        assigned = consumer.assignment()  # TopicPartition is a (topic, partition) tuple
        owned = {
            TopicPartition(topic, partition): offset
            for (topic, partition), offset in ends.items()
            if (topic, partition) in assigned
        }
        if not owned:
            return {}
        if membership_lost(consumer):
            # The group moved on without this member (frozen past its session): the new owners
            # read from the committed offset, which a commit now could only move back.
            log.warning("offset commit skipped: the group membership was lost")
            return {}
        try:
            await retrying("kafka", lambda: consumer.commit(owned))
        except (CommitFailedError, IllegalStateError) as exc:
            # The partitions moved to another member mid-batch: it re-reads from the last
            # committed offset and finds these events deduplicated.
            log.warning("offset commit refused after a rebalance", error=str(exc))
            return {}
        return owned


class RangeSource(RecordSource):
    """Partitions read from ``start`` up to ``end`` (exclusive), outside any group."""

    live = False

    def __init__(
        self, start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]
    ) -> None:
        self.start = dict(start)
        self.end = dict(end)
        self._remaining = {tp for tp, offset in start.items() if offset < end[tp]}

    def group_id(self, consumer: str) -> str | None:  # noqa: ARG002
        return None

    async def attach(self, consumer: AIOKafkaConsumer, topics: Sequence[str]) -> None:  # noqa: ARG002
        consumer.assign(sorted(self._remaining))
        for tp in self._remaining:
            consumer.seek(tp, self.start[tp])

    async def fetch(
        self, consumer: AIOKafkaConsumer, timeout_ms: int, max_records: int
    ) -> list[Any]:
        records = await super().fetch(consumer, timeout_ms, max_records)
        end = self.end
        return [r for r in records if r.offset < end[TopicPartition(r.topic, r.partition)]]

    async def finished(self, consumer: AIOKafkaConsumer) -> bool:
        """Pause the partitions that reached their end; True once none is left."""
        for tp in list(self._remaining):
            if await consumer.position(tp) >= self.end[tp]:
                self._remaining.discard(tp)
                with contextlib.suppress(IllegalStateError):
                    consumer.pause(tp)
        return not self._remaining
