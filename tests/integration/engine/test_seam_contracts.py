"""The engine's seams pass their contract suites (tests/seams): each dead-letter sink on each
transport (aiokafka, confluent, the in-memory broker), and each lender of connections."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from spectral.dlq.records import DeadLetterRecord
from spectral.engine.dead_letters import DeadLetterSink, KafkaDeadLetters, ReportedDeadLetters
from spectral.engine.metrics import ConsumerMetrics
from spectral.engine.source import configured_transport
from spectral.engine.transaction import BorrowedConnection, PoolConnections
from spectral.kafka.memory import MemoryBroker, MemoryTransport
from spectral.kafka.topics import dlq_topic
from spectral.kafka.transport import Transport
from spectral.settings import Settings
from tests.kafka_support import TRANSPORTS, create_topics, read_all
from tests.seams.connections import ConnectionsContract, LenderWorld
from tests.seams.dead_letter_sink import DeadLetterSinkContract, Form, SinkWorld
from tests.support import unique_name

pytestmark = pytest.mark.integration


# -- dead-letter sinks ------------------------------------------------------------------------


class _TransportSinks(SinkWorld):
    """``KafkaDeadLetters`` through a transport's sender, its table on the test's database."""

    def __init__(self, transport: Transport, pool: asyncpg.Pool, prefix: str) -> None:
        self.transport = transport
        self.pool = pool
        self.prefix = prefix

    async def source_topic(self, *, dlq_max_bytes: int | None = None) -> str:  # noqa: ARG002 - the subclasses' limit
        return unique_name(self.prefix + "sink.")

    def sink(self) -> DeadLetterSink:
        metrics = ConsumerMetrics(CollectorRegistry(), "contract")
        return KafkaDeadLetters(self.transport.sender([]), self.pool.acquire, metrics)

    async def _topic_records(self, topic: str) -> list[DeadLetterRecord]:
        raise NotImplementedError

    async def accounted(self, source_topic: str) -> list[tuple[int, str, Form]]:
        kept: list[tuple[int, str, Form]] = [
            (
                int(r.dlq["dlq.source.offset"]),
                r.reason,
                "reference" if r.is_reference else "full",
            )
            for r in await self._topic_records(dlq_topic(source_topic))
        ]
        rows = await self.pool.fetch(
            "SELECT source_offset, reason FROM core.dead_letters WHERE source_topic = $1 "
            "ORDER BY id",
            source_topic,
        )
        kept.extend((int(row[0]), str(row[1]), "table") for row in rows)
        return kept


class _KafkaSinks(_TransportSinks):
    def __init__(self, settings: Settings, bootstrap: str, pool: asyncpg.Pool) -> None:
        super().__init__(configured_transport(settings, bootstrap), pool, settings.topic_prefix)
        self.bootstrap = bootstrap

    async def source_topic(self, *, dlq_max_bytes: int | None = None) -> str:
        topic = await super().source_topic()
        configs = {"max.message.bytes": str(dlq_max_bytes)} if dlq_max_bytes else None
        await create_topics(self.bootstrap, [topic, dlq_topic(topic)], configs=configs)
        return topic

    async def _topic_records(self, topic: str) -> list[DeadLetterRecord]:
        return [
            DeadLetterRecord(r.topic, r.partition, r.offset, 0, r.key, r.value, r.headers)
            for r in await read_all(self.bootstrap, topic)
        ]


class _MemorySinks(_TransportSinks):
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.broker = MemoryBroker()
        super().__init__(MemoryTransport(self.broker), pool, "memory.")

    async def source_topic(self, *, dlq_max_bytes: int | None = None) -> str:
        topic = await super().source_topic()
        if dlq_max_bytes is not None:
            self.broker.max_message_bytes = dlq_max_bytes
        return topic

    async def _topic_records(self, topic: str) -> list[DeadLetterRecord]:
        return [
            DeadLetterRecord(r.topic, r.partition, r.offset, 0, r.key, r.value or b"", r.headers)
            for r in self.broker.records(topic)
        ]


class _Reports(SinkWorld):
    def __init__(self) -> None:
        self.sinks: list[ReportedDeadLetters] = []

    async def source_topic(self, *, dlq_max_bytes: int | None = None) -> str:  # noqa: ARG002
        return unique_name("reported.")

    def sink(self) -> DeadLetterSink:
        self.sinks.append(ReportedDeadLetters())
        return self.sinks[-1]

    async def accounted(self, source_topic: str) -> list[tuple[int, str, Form]]:
        return [
            (int(note.source.rsplit(":", 1)[1]), note.reason, "noted")
            for sink in self.sinks
            for note in sink.notes
            if note.source.startswith(source_topic + ":")
        ]


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    try:
        yield pool
    finally:
        await pool.close()


class TestKafkaDeadLetters(DeadLetterSinkContract):
    """On each transport: the sender differs, the topic and the table are the same."""

    @pytest.fixture(params=sorted(TRANSPORTS))
    def world(
        self,
        request: pytest.FixtureRequest,
        settings: Settings,
        kafka_bootstrap: str,
        pool: asyncpg.Pool,
    ) -> SinkWorld:
        return _KafkaSinks(settings.replace(**TRANSPORTS[request.param]), kafka_bootstrap, pool)


class TestKafkaDeadLettersOnMemory(DeadLetterSinkContract):
    @pytest.fixture
    def world(self, pool: asyncpg.Pool) -> SinkWorld:
        return _MemorySinks(pool)


class TestReportedDeadLetters(DeadLetterSinkContract):
    large_forms = ("noted",)

    @pytest.fixture
    def world(self) -> SinkWorld:
        return _Reports()


# -- connections ------------------------------------------------------------------------------


class _Lenders(LenderWorld):
    def __init__(
        self, lender: PoolConnections | BorrowedConnection, observer: asyncpg.Connection
    ) -> None:
        self.lender = lender
        self.observer = observer
        self.held: asyncpg.transaction.Transaction | None = None

    async def finish(self) -> None:
        if self.held is not None:
            await self.held.commit()
            self.held = None


@pytest.fixture
async def seam_database(database_url: str) -> str:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("CREATE TABLE seam_rows (n int PRIMARY KEY)")
    finally:
        await conn.close()
    return database_url


@pytest.fixture
async def observer(seam_database: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(seam_database)
    try:
        yield conn
    finally:
        await conn.close()


class TestPoolConnections(ConnectionsContract):
    @pytest.fixture
    async def world(
        self, seam_database: str, observer: asyncpg.Connection
    ) -> AsyncIterator[LenderWorld]:
        pool = await asyncpg.create_pool(seam_database, min_size=1, max_size=2)
        try:
            yield _Lenders(PoolConnections(pool), observer)
        finally:
            await pool.close()

    async def test_a_connection_lent_again_had_its_session_reset(self, seam_database: str) -> None:
        """The pool's reset runs behind the borrower, and before the connection is lent again:
        a session setting a batch left does not reach the next batch."""
        pool = await asyncpg.create_pool(seam_database, min_size=1, max_size=1)
        lender = PoolConnections(pool)
        try:
            async with lender.lend() as conn:
                await conn.execute("SET application_name = 'left-behind'")
                pid = conn.get_server_pid()
            async with lender.lend() as conn:
                assert conn.get_server_pid() == pid  # the same connection, after its reset
                assert await conn.fetchval("SHOW application_name") != "left-behind"
        finally:
            await pool.close()


class TestBorrowedConnectionInItsTransaction(ConnectionsContract):
    @pytest.fixture
    async def world(
        self, seam_database: str, observer: asyncpg.Connection
    ) -> AsyncIterator[LenderWorld]:
        conn = await asyncpg.connect(seam_database)
        world = _Lenders(BorrowedConnection(conn), observer)
        world.held = conn.transaction()
        await world.held.start()
        try:
            yield world
        finally:
            await conn.close()


class TestBorrowedConnectionOnItsOwn(ConnectionsContract):
    @pytest.fixture
    async def world(
        self, seam_database: str, observer: asyncpg.Connection
    ) -> AsyncIterator[LenderWorld]:
        conn = await asyncpg.connect(seam_database)
        try:
            yield _Lenders(BorrowedConnection(conn), observer)
        finally:
            await conn.close()
