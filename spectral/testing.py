"""``spectral.testing``: a pytest plugin to test a projection against the real local stack, and
an in-memory Kafka to test it with no broker at all.

Enable it in the ``conftest.py`` of your tests (it is never enabled by installing spectral)::

    pytest_plugins = ["spectral.testing"]

or run ``pytest -p spectral.testing``. It needs ``pytest`` and, for the async helpers,
``pytest-asyncio`` (``pip install 'spectral[testing]'``).

Where the stack comes from: ``SPECTRAL_KAFKA_BOOTSTRAP`` and ``SPECTRAL_DATABASE_URL`` when both
are set (an admin URL: databases are created and dropped through it), else the local stack
(``spectral dev up``, started if needed). A missing stack FAILS the test; it is never skipped.

Fixtures (all function-scoped unless said):

``spectral_database_url``  a database of the test's own, cloned from a template that
                           ``spectral db migrate`` built once per session — spectral's track and
                           every installed plugin's — and dropped after the test;
``spectral_topic_prefix``  a topic prefix of the test's own: topics never collide;
``spectral_settings``      :class:`~spectral.settings.Settings` for both;
``spectral_env``           the environment for running ``spectral`` as a subprocess against them;
``spectral``               a :class:`Harness`: ``await spectral.publish(envelope, ...)`` (through
                           the outbox and the relay, as a producer does), ``await
                           spectral.run_until_idle("my-deployment")`` (the live engine, its own
                           consumer group, until no record arrived for ``idle`` seconds),
                           ``await spectral.rebuild("my-deployment")``, ``await
                           spectral.dead_letters(event_type)`` and ``spectral.connect()``.

Without a broker (PostgreSQL only: River's ``rivertest.Worker.Work``, FastStream's
``TestKafkaBroker``): :class:`MemoryKafka` is an in-memory Kafka behind the same transport seam
as the real clients. ``await MemoryKafka().apply(handler, conn, *envelopes)`` — or the
shortcut :func:`apply` — runs ``envelopes`` through the real engine (decode, dedup in
``core.event_handled``, the handler, the dead letters with their fallbacks) on the test's own
connection ``conn``: inside its open transaction each batch is a savepoint, so the test sees
the effects and rolls everything back. :meth:`MemoryKafka.run_until_idle` runs a live group
member on a pool instead (commits, ``after_commit``, ``periodic``). Hostile records go in with
:meth:`MemoryKafka.publish_raw`. The ``spectral_database_url`` fixture starts no broker
(``spectral_postgres``: ``SPECTRAL_DATABASE_URL``, else the local stack's PostgreSQL alone).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from contracts import EventEnvelope, EventRegistry, envelope_headers
from spectral import devstack
from spectral.cli.deployments import handler_factory
from spectral.db.migrate import migrate
from spectral.devstack import Endpoints
from spectral.dlq.records import DeadLetterRecord, scan_dead_letters
from spectral.engine.engine import ConsumerEngine, EngineOptions, RunSummary
from spectral.engine.handler import Handler, Outcome
from spectral.engine.transaction import BorrowedConnection
from spectral.kafka.memory import MemoryBroker, MemoryRecord, MemoryTransport
from spectral.kafka.topics import dlq_topic, topic_for
from spectral.kafka.transport import FixedRange, TopicPartition
from spectral.outbox.relay import OutboxRelay, RelayMetrics, RelayOptions
from spectral.outbox.writer import OutboxItem, enqueue
from spectral.plugins import installed_registry
from spectral.replay.rebuild import rebuild
from spectral.replay.replay import ReplayReport
from spectral.settings import Settings, load_settings

__all__ = [
    "Consumed",
    "DeadLetterRecord",
    "Harness",
    "MemoryBroker",
    "MemoryKafka",
    "MemoryRecord",
    "MemoryTransport",
    "apply",
]


def _with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{database}"))


def _unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:12]}"


async def _admin(url: str, *statements: str) -> None:
    conn = await asyncpg.connect(_with_database(url, "postgres"))
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def spectral_stack() -> Endpoints:
    """Kafka bootstrap and an admin database URL for the session."""
    base = load_settings()
    if base.kafka_bootstrap and base.database_url:
        return Endpoints(base.kafka_bootstrap, base.database_url.get_secret_value())
    try:
        return devstack.up(base)
    except Exception as exc:  # noqa: BLE001 - whatever stops the stack, the test fails with it
        pytest.fail(f"no Kafka/PostgreSQL for the tests: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def spectral_postgres() -> str:
    """An admin database URL for the session: ``SPECTRAL_DATABASE_URL``, else the local stack's
    PostgreSQL (started if needed). No broker is started for it."""
    try:
        return devstack.database_up(load_settings())
    except Exception as exc:  # noqa: BLE001 - whatever stops the server, the test fails with it
        pytest.fail(f"no PostgreSQL for the tests: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def spectral_template(spectral_postgres: str) -> Iterator[str]:
    """A database migrated once (spectral's track and the installed plugins'), cloned per test."""
    name = f"spectral_tpl_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    url = spectral_postgres
    asyncio.run(_admin(url, f'CREATE DATABASE "{name}"'))
    try:
        asyncio.run(migrate(_with_database(url, name)))
        yield name
    finally:
        asyncio.run(_admin(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def spectral_database_url(spectral_postgres: str, spectral_template: str) -> Iterator[str]:
    """A fresh, migrated database of the test's own, dropped afterwards (PostgreSQL only: a
    test on :class:`MemoryKafka` starts no broker)."""
    name = _unique("spectral_t_")
    url = spectral_postgres
    asyncio.run(_admin(url, f'CREATE DATABASE "{name}" TEMPLATE "{spectral_template}"'))
    try:
        yield _with_database(url, name)
    finally:
        asyncio.run(_admin(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def spectral_topic_prefix() -> str:
    """A topic prefix of the test's own."""
    return _unique("t") + "."


@pytest.fixture
def spectral_settings(
    spectral_stack: Endpoints, spectral_database_url: str, spectral_topic_prefix: str
) -> Settings:
    """Settings for the test's database, topic prefix and the stack's broker."""
    return load_settings(
        kafka_bootstrap=spectral_stack.kafka_bootstrap,
        database_url=spectral_database_url,
        topic_prefix=spectral_topic_prefix,
    )


@pytest.fixture
def spectral_env(spectral_settings: Settings) -> dict[str, str]:
    """The environment for ``spectral`` subprocesses against this test's database and topics."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECTRAL_")}
    url = spectral_settings.database_url
    env.update(
        {
            "SPECTRAL_KAFKA_BOOTSTRAP": spectral_settings.kafka_bootstrap or "",
            "SPECTRAL_DATABASE_URL": url.get_secret_value() if url else "",
            "SPECTRAL_TOPIC_PREFIX": spectral_settings.topic_prefix,
        }
    )
    return env


@pytest.fixture
def spectral(spectral_settings: Settings) -> Harness:
    return Harness(spectral_settings)


class Harness:
    """Helpers bound to one test's settings (database, topic prefix, broker)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        if settings.kafka_bootstrap is None or settings.database_url is None:
            msg = "the harness needs settings with a broker and a database"
            raise ValueError(msg)
        self.kafka_bootstrap: str = settings.kafka_bootstrap
        self.database_url: str = settings.database_url.get_secret_value()

    def topic(self, event_type: str) -> str:
        """The topic of ``event_type`` under this test's prefix."""
        return topic_for(event_type, self.settings.topic_prefix)

    async def connect(self) -> asyncpg.Connection:
        """An admin connection to the test's database (close it)."""
        return await asyncpg.connect(self.database_url)

    async def publish(self, *envelopes: EventEnvelope[Any]) -> int:
        """Enqueue ``envelopes`` in core.outbox in one transaction (record key: the event's
        own) and relay what is publishable; return how many rows the relay published."""
        events = installed_registry()
        conn = await asyncpg.connect(self.database_url)
        try:
            async with conn.transaction():
                await enqueue(
                    conn,
                    [OutboxItem(e, events.record_key(e).decode()) for e in envelopes],
                )
        finally:
            await conn.close()
        relay = OutboxRelay(
            self.settings,
            kafka_bootstrap=self.kafka_bootstrap,
            database_url=self.database_url,
            metrics=RelayMetrics(CollectorRegistry()),
            options=RelayOptions(once=True),
        )
        report = await relay.run()
        return int(report.published)

    def handler_factory(self, deployment: str) -> Callable[[str], Handler[Any]]:
        """A ``database_url -> Handler`` of the installed deployment ``deployment``."""
        return handler_factory(deployment, self.settings)

    async def run_until_idle(
        self, deployment: str, *, idle: float = 1.0, group: str | None = None
    ) -> RunSummary:
        """Run deployment ``deployment`` as ``spectral consume`` does until no record arrived
        for ``idle`` seconds; its offsets are committed to ``group`` (default: the prefix +
        the name), so a second run goes on where the first stopped."""
        handler = self.handler_factory(deployment)(self.database_url)
        engine = ConsumerEngine(
            handler,
            self.settings,
            kafka_bootstrap=self.kafka_bootstrap,
            database_url=self.database_url,
            options=EngineOptions(group=group, stop_when_idle=idle),
            registry=CollectorRegistry(),
        )
        return await engine.run()

    async def rebuild(self, deployment: str, *, dry_run: bool = False) -> ReplayReport:
        """``spectral rebuild NAME`` (no live member may be in the group)."""
        return await rebuild(
            self.handler_factory(deployment),
            self.settings,
            kafka_bootstrap=self.kafka_bootstrap,
            database_url=self.database_url,
            dry_run=dry_run,
        )

    async def dead_letters(self, event_type: str) -> Sequence[DeadLetterRecord]:
        """Every record of ``event_type``'s dead-letter topic, in offset order per partition
        (``.reason``, ``.dlq['dlq.consumer']``, ``.decoded()``: what ``spectral dlq show``
        prints)."""
        topic = dlq_topic(self.topic(event_type))
        return [
            record
            async for batch in scan_dead_letters(self.settings, self.kafka_bootstrap, topic)
            for record in batch
        ]


@dataclasses.dataclass(frozen=True)
class Consumed:
    """What :meth:`MemoryKafka.apply` did with the records it ran."""

    summary: RunSummary
    dead_letters: tuple[DeadLetterRecord, ...]
    """The dead letters produced by this run, in order (``.reason``, ``.dlq``, ``.decoded()``)."""

    def count(self, outcome: Outcome | str) -> int:
        """Records that ended ``outcome`` (``applied``, ``deduplicated``, ``stale``,
        ``dead_lettered``)."""
        return self.summary.counts[Outcome(outcome)]


class MemoryKafka:
    """An in-memory Kafka for one test: publish envelopes (or raw records) to it, then run a
    handler over them through the real engine (see the module docstring)."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        events: EventRegistry | None = None,
        partitions: int = 1,
        max_message_bytes: int | None = None,
    ) -> None:
        """``partitions``: of every topic (created by its first record);
        ``max_message_bytes``: the largest record the broker takes (Kafka's default)."""
        self.settings = settings or Settings()
        self.events = events or installed_registry()
        broker = MemoryBroker(partitions=partitions)
        if max_message_bytes is not None:
            broker.max_message_bytes = max_message_bytes
        self.broker = broker
        self.transport = MemoryTransport(broker)
        self._read: dict[TopicPartition, int] = {}
        """How far :meth:`apply` read each partition."""

    def topic(self, event_type: str) -> str:
        """The topic of ``event_type`` under the settings' prefix."""
        return topic_for(event_type, self.settings.topic_prefix)

    def publish(self, *envelopes: EventEnvelope[Any]) -> list[MemoryRecord]:
        """Write ``envelopes`` as a producer does: encoded, keyed by their entity, with the
        ``event_type`` and ``idempotency_key`` headers."""
        return [
            self.broker.append(
                self.topic(e.event_type),
                self.events.encode(e),
                key=self.events.record_key(e),
                headers=envelope_headers(e),
            )
            for e in envelopes
        ]

    def publish_raw(
        self,
        event_type: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes | None]] = (),
    ) -> MemoryRecord:
        """Write any bytes to ``event_type``'s topic (a hostile or foreign producer)."""
        return self.broker.append(self.topic(event_type), value, key=key, headers=headers)

    async def apply(
        self, handler: Handler[Any], conn: asyncpg.Connection, *envelopes: EventEnvelope[Any]
    ) -> Consumed:
        """Publish ``envelopes``, then run ``handler`` over every record of its topics not run
        yet, on ``conn`` (inside its open transaction each batch is a savepoint: nothing
        commits; without one each batch commits). Returns when they are all done."""
        self.publish(*envelopes)
        topics = [self.topic(t) for t in handler.event_types]
        dlq_before = {t: len(self.broker.records(dlq_topic(t))) for t in topics}
        end: dict[TopicPartition, int] = {}
        for topic in topics:
            self.broker.create_topic(topic)
            for partition in range(self.broker.partitions(topic)):
                tp = TopicPartition(topic, partition)
                end[tp] = self.broker.end_offset(tp)
        start = {tp: self._read.get(tp, 0) for tp in end}
        engine = ConsumerEngine(
            handler,
            self.settings,
            transport=self.transport,
            reading=FixedRange(start, end),
            connections=BorrowedConnection(conn),
            registry=CollectorRegistry(),
            events=self.events,
        )
        summary = await engine.run()
        self._read.update(end)
        dead = [
            _dead_letter(record)
            for topic in topics
            for record in self.broker.records(dlq_topic(topic))[dlq_before[topic] :]
        ]
        return Consumed(summary, tuple(dead))

    async def run_until_idle(
        self,
        handler: Handler[Any],
        database_url: str,
        *,
        idle: float = 0.5,
        group: str | None = None,
    ) -> RunSummary:
        """Run ``handler`` as ``spectral consume`` does — a member of its consumer group on a
        pool of ``database_url``, committing each batch — until no record arrived for ``idle``
        seconds."""
        engine = ConsumerEngine(
            handler,
            self.settings,
            transport=self.transport,
            database_url=database_url,
            options=EngineOptions(group=group, stop_when_idle=idle, poll_timeout_ms=50),
            registry=CollectorRegistry(),
            events=self.events,
        )
        return await engine.run()

    def dead_letters(self, event_type: str) -> list[DeadLetterRecord]:
        """Every dead letter of ``event_type``'s topic so far."""
        return [_dead_letter(r) for r in self.broker.records(dlq_topic(self.topic(event_type)))]


def _dead_letter(record: MemoryRecord) -> DeadLetterRecord:
    return DeadLetterRecord(
        record.topic,
        record.partition,
        record.offset,
        record.timestamp,
        record.key,
        record.value or b"",
        record.headers,
    )


async def apply(
    handler: Handler[Any], conn: asyncpg.Connection, *envelopes: EventEnvelope[Any]
) -> Consumed:
    """Run ``envelopes`` through ``handler`` on ``conn`` with an in-memory Kafka of their own
    (:meth:`MemoryKafka.apply`)."""
    return await MemoryKafka().apply(handler, conn, *envelopes)
