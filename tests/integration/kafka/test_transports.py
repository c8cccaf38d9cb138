"""The Kafka transports pass the seams' contract suites against the real broker: aiokafka, and
confluent (librdkafka) with each group protocol."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import pytest
from aiokafka import AIOKafkaProducer

from spectral.engine.source import configured_transport
from spectral.kafka.aiokafka_source import AiokafkaSource
from spectral.kafka.confluent import ConfluentPublisher, ConfluentSource
from spectral.kafka.produce import AiokafkaSender, Message, Sender, Sent
from spectral.kafka.transport import (
    FetchOptions,
    FixedRange,
    Reading,
    RecordSource,
    Subscription,
    TopicPartition,
)
from spectral.settings import Settings
from tests.kafka_support import PRODUCING, TRANSPORTS, create_topics
from tests.seams.record_source import Headers, Recorder, RecordSourceContract, SourceWorld, drain
from tests.seams.sender import SenderContract, SenderWorld
from tests.support import unique_name

pytestmark = pytest.mark.integration


class KafkaWorld(SourceWorld, SenderWorld):
    def __init__(self, settings: Settings, bootstrap: str, producer: AIOKafkaProducer) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self.transport = configured_transport(settings, bootstrap)
        self._producer = producer

    async def topic(self, partitions: int = 1, *, max_message_bytes: int | None = None) -> str:
        name = unique_name(self.settings.topic_prefix + "contract.")
        configs = {"max.message.bytes": str(max_message_bytes)} if max_message_bytes else None
        await create_topics(self.bootstrap, [name], partitions=partitions, configs=configs)
        return name

    async def produce(
        self,
        topic: str,
        partition: int,
        records: Sequence[tuple[bytes | None, bytes | None, Headers]],
    ) -> list[int]:
        offsets = []
        for key, value, headers in records:
            meta = await self._producer.send_and_wait(
                topic, value=value, key=key, headers=list(headers), partition=partition
            )
            offsets.append(meta.offset)
        return offsets

    def source(self, reading: Reading, options: FetchOptions) -> RecordSource:
        return self.transport.source(reading, options)

    def sender(self) -> Sender:
        return self.transport.sender([])

    async def read(self, topic: str) -> list[tuple[int, bytes | None, bytes | None, Headers]]:
        tp = TopicPartition(topic, 0)
        probe = self.source(FixedRange({tp: 0}, {tp: 0}), FetchOptions())
        await probe.start([topic], Recorder())
        try:
            end = (await probe.end_offsets([tp]))[tp]
        finally:
            await probe.stop()
        reader = self.source(FixedRange({tp: 0}, {tp: end}), FetchOptions())
        await reader.start([topic], Recorder())
        try:
            records = await drain(reader, end)
        finally:
            await reader.stop()
        return [(r.partition, r.key, r.value, tuple(r.headers or ())) for r in records]


@pytest.fixture(params=sorted(TRANSPORTS))
async def world(
    request: pytest.FixtureRequest, settings: Settings, kafka_bootstrap: str
) -> AsyncIterator[KafkaWorld]:
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        yield KafkaWorld(settings.replace(**TRANSPORTS[request.param]), kafka_bootstrap, producer)
    finally:
        await producer.stop()


class TestRecordSource(RecordSourceContract):
    pass


class TestSender(SenderContract):
    pass


def test_the_settings_choose_the_transport(settings: Settings, kafka_bootstrap: str) -> None:
    member = FetchOptions()
    chosen = {
        name: type(
            configured_transport(settings.replace(**values), kafka_bootstrap).source(
                Subscription("g"), member
            )
        )
        for name, values in TRANSPORTS.items()
    }
    assert chosen == {
        "aiokafka": AiokafkaSource,
        "confluent-classic": ConfluentSource,
        "confluent-consumer": ConfluentSource,
    }
    assert configured_transport(settings, kafka_bootstrap).name == "aiokafka"  # the default


async def test_the_aiokafka_sender_tracks_only_its_topics_metadata(
    settings: Settings, kafka_bootstrap: str
) -> None:
    """A producer that has sent nothing tracks no topic, and aiokafka then refreshes the metadata
    of every topic of the cluster each ``metadata_max_age_ms`` (84 ms of CPU at 5,600 topics):
    the sender tracks the topics it was given from the start."""
    topic = unique_name(settings.topic_prefix + "contract.")
    await create_topics(kafka_bootstrap, [topic])
    sender = AiokafkaSender(settings, kafka_bootstrap, topics=[topic])
    await sender.start()
    try:
        assert sender._client().client._topics == {topic}
    finally:
        await sender.stop()


async def test_a_key_lands_on_the_same_partition_whatever_the_client(
    settings: Settings, kafka_bootstrap: str
) -> None:
    """librdkafka's default partitioner (CRC32) is not aiokafka's and Java's (murmur2): the
    confluent sender (dead letters, redrives) and publisher (the relay) choose murmur2, so a key
    keeps its partition across a change of transport and a redrive lands where the original
    did."""
    topic = unique_name(settings.topic_prefix + "keys.")
    await create_topics(kafka_bootstrap, [topic], partitions=6)
    keys = [f"key-{n}".encode() for n in range(40)]
    reference = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await reference.start()
    try:
        expected = [
            (await reference.send_and_wait(topic, value=b"v", key=key)).partition for key in keys
        ]
    finally:
        await reference.stop()
    assert len(set(expected)) == 6  # the keys spread: the comparison can fail
    for name in PRODUCING:
        sender = configured_transport(settings.replace(**TRANSPORTS[name]), kafka_bootstrap).sender(
            [topic]
        )
        await sender.start()
        try:
            outcomes = await sender.send_each([Message(topic, key, b"v", ()) for key in keys])
        finally:
            await sender.stop()
        assert [o.partition for o in outcomes if isinstance(o, Sent)] == expected, name
    publisher = ConfluentPublisher(
        settings,
        kafka_bootstrap,
        client_id="test",
        linger_ms=5,
        max_batch_bytes=16384,
        max_request_bytes=1 << 20,
    )
    await publisher.start()
    try:
        acks = [await publisher.send(topic, value=b"v", key=key, headers=[]) for key in keys]
        assert [(await ack).partition for ack in acks] == expected
    finally:
        await publisher.stop()
