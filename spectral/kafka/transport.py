"""The transport seam: where a consumer's records come from, and how it tells its engine that
partitions move.

A :class:`RecordSource` owns its client from :meth:`~RecordSource.start` to
:meth:`~RecordSource.stop`; the engine never sees the client. What it reads is chosen once, at
construction (FastStream's ``LogicSubscriber`` decides subscribe-or-assign once in ``start``):

* :class:`Subscription`: a member of a consumer group, subscribed to the topics; partitions move
  between members; offsets are committed after each batch; it runs until stopped;
* :class:`FixedRange`: fixed partitions read from ``start`` up to ``end`` (exclusive), outside
  any group — no membership, no commits; it is finished once every partition reached its end.

The rebalance protocol runs one way, from the source to the engine, through :class:`Rebalance`
(the engine implements it; the source calls it from its client's rebalance callbacks on the
engine's event loop, one call at a time):

1. ``await rebalance.revoking(partitions)`` **before** ``partitions`` leave this member. The
   engine returns once no transaction is running and every batch whose transaction committed has
   committed its offsets (the source still owns the partitions, so those commits are accepted);
   records of ``partitions`` fetched before the call are never applied afterwards (their new
   owner — maybe this member again — reads them from the committed offset). Partitions the
   member keeps (an incremental rebalance) are not named and keep flowing.
2. ``rebalance.assigned(partitions)`` once ``partitions`` arrived (possibly none: the member
   joined and got nothing).

Implementations: :mod:`spectral.kafka.aiokafka_source` (the default client) and
:mod:`spectral.kafka.memory` (an in-memory broker for tests). ``tests/seams/`` holds the
contract suite every one of them passes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from aiokafka import TopicPartition

from spectral.errors import PermanentError
from spectral.kafka.produce import Sender

__all__ = [
    "FetchOptions",
    "FixedRange",
    "Reading",
    "Rebalance",
    "Record",
    "RecordSource",
    "Subscription",
    "TopicPartition",
    "Transport",
    "UnreadableRecordsError",
    "offsets_after",
]


class UnreadableRecordsError(PermanentError):
    """Kafka returned records this client cannot read; retrying cannot help."""


class Record(Protocol):
    """A fetched record, as every transport hands it over (aiokafka's ``ConsumerRecord`` is
    one)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def timestamp(self) -> int | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes | None]] | None: ...


class Transport(Protocol):
    """A Kafka client library (or the in-memory broker): builds the record sources and the
    senders a consumer run needs, each owning its client."""

    @property
    def name(self) -> str:
        """How it is named in settings and logs (``aiokafka``, ``memory``)."""

    def source(self, reading: Reading, options: FetchOptions) -> RecordSource:
        """A record source reading ``reading`` (not started)."""

    def sender(self, topics: Sequence[str], *, delivery_timeout_ms: int | None = None) -> Sender:
        """A sender (not started); ``topics``: those it will produce to first;
        ``delivery_timeout_ms``: how long a record may wait for the cluster to take it (longer
        than the request timeout: an operator's command waits out a partition below
        ``min.insync.replicas``)."""


class Rebalance(Protocol):
    """The engine's side of the rebalance protocol (see the module docstring)."""

    async def revoking(self, partitions: Collection[TopicPartition]) -> None:
        """``partitions`` are about to leave: return once nothing of them is being applied and
        every committed batch's offsets are committed; never apply what was fetched before."""

    def assigned(self, partitions: Collection[TopicPartition]) -> None:
        """``partitions`` arrived (possibly none)."""


@dataclass(frozen=True, slots=True)
class Subscription:
    """A live member of consumer group ``group``."""

    group: str
    auto_offset_reset: str = "earliest"
    """Where a partition the group never committed on starts."""


@dataclass(frozen=True, slots=True)
class FixedRange:
    """Partitions read from ``start`` up to ``end`` (exclusive), outside any group."""

    start: Mapping[TopicPartition, int]
    end: Mapping[TopicPartition, int]

    def remaining(self) -> set[TopicPartition]:
        """The partitions with something to read."""
        return {tp for tp, offset in self.start.items() if offset < self.end[tp]}


Reading = Subscription | FixedRange


@dataclass(frozen=True, slots=True)
class FetchOptions:
    """What a source is asked to hold and fetch."""

    client_id: str = "spectral"
    max_records: int = 2000
    """Records one :meth:`RecordSource.fetch` returns at most."""
    extra: Mapping[str, object] = field(default_factory=dict)
    """Client options of the transport (a test's timeouts), passed through as they are."""


def _names(partitions: Collection[TopicPartition]) -> list[str]:
    return [f"{tp.topic}:{tp.partition}" for tp in sorted(partitions)]


def offsets_after(records: Sequence[Record]) -> dict[TopicPartition, int]:
    """The offset to commit per partition: one past the last of ``records`` on it."""
    ends: dict[tuple[str, int], int] = {}
    for record in records:  # plain tuples here: a named tuple per record costs ~0.3 us
        where = (record.topic, record.partition)
        if record.offset >= ends.get(where, 0):
            ends[where] = record.offset + 1
    return {TopicPartition(topic, partition): end for (topic, partition), end in ends.items()}


class RecordSource(ABC):
    """How a run reads its records (see the module docstring). Calls come from one event
    loop; ``start`` comes first and ``stop`` last."""

    def __init__(self, reading: Reading) -> None:
        self.reading = reading

    @property
    def live(self) -> bool:
        """A member of a live consumer group: the handler's ``start`` and ``periodic`` run,
        offsets are committed."""
        return isinstance(self.reading, Subscription)

    @property
    def group(self) -> str | None:
        """The consumer group joined (None: none)."""
        return self.reading.group if isinstance(self.reading, Subscription) else None

    @abstractmethod
    async def start(self, topics: Sequence[str], rebalance: Rebalance) -> None:
        """Connect, then subscribe to ``topics`` (a :class:`Subscription`) or assign the range's
        partitions at their start (a :class:`FixedRange`). A transient failure raises and the
        caller calls ``start`` again; a second call after a success does nothing."""

    @abstractmethod
    async def fetch(self, timeout_ms: int) -> Sequence[Record]:
        """The next records (at most ``FetchOptions.max_records``; none after ``timeout_ms``), in
        offset order per partition; for a range, none at or past a partition's end. A transient
        fault returns none (logged); records the client cannot read raise
        :class:`UnreadableRecordsError`."""

    async def finished(self) -> bool:
        """True once there is nothing left to read (never, for a live member)."""
        return False

    @abstractmethod
    async def commit(self, records: Sequence[Record]) -> Mapping[TopicPartition, int]:
        """Commit past ``records`` (the offset after the last of each partition): only the
        partitions this member still owns, and nothing once its membership was lost. The offsets
        committed per partition (none for a range). A refused commit (the partitions moved)
        returns none; a transient fault raises, to be retried."""

    @abstractmethod
    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions this member reads now."""

    @abstractmethod
    async def end_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """The offset after each partition's last record."""

    @abstractmethod
    async def beginning_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """Each partition's first offset still there."""

    @abstractmethod
    async def committed(self, partition: TopicPartition) -> int | None:
        """The group's committed offset on ``partition`` (None: nothing committed, or no
        group)."""

    async def probe(self) -> None:
        """One round trip to the broker (the end offsets of this member's partitions, or the
        cluster's metadata when it holds none); raises when it does not answer."""
        await self.end_offsets(self.assignment())

    async def caught_up(self) -> bool:
        """Whether this member has read every partition it owns to its end, and owns what the
        group means it to: a member whose partitions were lost (the group moved on without it)
        is not caught up before the group assigned it partitions again (``--stop-when-idle``
        asks before it stops). By default yes: a source whose fetch answers only once it has
        caught up and whose client keeps its partitions until the group takes them back
        (aiokafka's, the in-memory one) never looks idle before."""
        return True

    @abstractmethod
    async def stop(self) -> None:
        """Leave the group (a live member) and close the client; safe to call again, and
        after a failed or no ``start``."""

    @staticmethod
    def names(partitions: Collection[TopicPartition]) -> list[str]:
        """``topic:partition`` of each, sorted: how partitions are logged."""
        return _names(partitions)
