"""What the transports of the Kafka client libraries (:mod:`spectral.kafka.aiokafka_source`,
:mod:`spectral.kafka.confluent`) share: a :class:`ClientTransport` of one cluster builds its
record sources and senders from the cluster's settings and bootstrap address, and each
:class:`ClientSource` keeps them with its fetch options and, reading a range, the partitions it
has left to read."""

from __future__ import annotations

from abc import ABC
from collections.abc import Sequence
from typing import ClassVar, Protocol

from aiokafka import TopicPartition

from spectral.kafka.produce import Sender
from spectral.kafka.transport import FetchOptions, FixedRange, Reading, RecordSource
from spectral.settings import Settings


class ClientSource(RecordSource, ABC):
    """A record source on a client library's consumer of one cluster."""

    def __init__(
        self,
        settings: Settings,
        bootstrap: str,
        reading: Reading,
        options: FetchOptions | None = None,
    ) -> None:
        super().__init__(reading)
        self._settings = settings
        self._bootstrap = bootstrap
        self._options = options or FetchOptions()
        self._attached = False
        """Subscribed or assigned (``start`` succeeded)."""
        self._remaining: set[TopicPartition] = (
            reading.remaining() if isinstance(reading, FixedRange) else set()
        )
        """A range's partitions not read to their end yet."""


class SenderType(Protocol):
    def __call__(
        self,
        settings: Settings,
        bootstrap: str,
        *,
        topics: Sequence[str] = (),
        delivery_timeout_ms: int | None = None,
    ) -> Sender:
        """A sender (not started) on a producer of its own."""


class ClientTransport:
    """The :class:`~spectral.kafka.transport.Transport` of one cluster through a client library:
    a subclass names the library and its source and sender types."""

    name: ClassVar[str]
    source_type: ClassVar[type[ClientSource]]
    sender_type: ClassVar[SenderType]

    def __init__(self, settings: Settings, bootstrap: str) -> None:
        self._settings = settings
        self._bootstrap = bootstrap

    def source(self, reading: Reading, options: FetchOptions) -> RecordSource:
        return self.source_type(self._settings, self._bootstrap, reading, options)

    def sender(self, topics: Sequence[str], *, delivery_timeout_ms: int | None = None) -> Sender:
        return self.sender_type(
            self._settings,
            self._bootstrap,
            topics=topics,
            delivery_timeout_ms=delivery_timeout_ms,
        )
