"""The in-memory broker's record source and sender pass the seams' contract suites (no server:
this is what lets a plugin's tests trust it as a stand-in for Kafka)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import pytest

from spectral.kafka.memory import MemoryBroker, MemorySender, MemoryTransport
from spectral.kafka.produce import Sender
from spectral.kafka.transport import FetchOptions, Reading, RecordSource
from tests.seams.record_source import Headers, RecordSourceContract, SourceWorld
from tests.seams.sender import SenderContract, SenderWorld


class MemoryWorld(SourceWorld, SenderWorld):
    def __init__(self) -> None:
        self.broker = MemoryBroker()
        self.transport = MemoryTransport(self.broker)

    async def topic(self, partitions: int = 1, *, max_message_bytes: int | None = None) -> str:
        name = f"t{uuid.uuid4().hex[:10]}"
        self.broker.create_topic(name, partitions)
        if max_message_bytes is not None:
            self.broker.max_message_bytes = max_message_bytes
        return name

    async def produce(
        self,
        topic: str,
        partition: int,
        records: Sequence[tuple[bytes | None, bytes | None, Headers]],
    ) -> list[int]:
        return [
            self.broker.append(topic, value, key=key, headers=headers, partition=partition).offset
            for key, value, headers in records
        ]

    def source(self, reading: Reading, options: FetchOptions) -> RecordSource:
        return self.transport.source(reading, options)

    def sender(self) -> Sender:
        return MemorySender(self.broker)

    async def read(self, topic: str) -> list[tuple[int, bytes | None, bytes | None, Headers]]:
        return [(r.partition, r.key, r.value, r.headers) for r in self.broker.records(topic)]


@pytest.fixture
def world() -> MemoryWorld:
    return MemoryWorld()


class TestMemorySource(RecordSourceContract):
    pass


class TestMemorySender(SenderContract):
    pass
