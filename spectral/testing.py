"""``spectral.testing``: a pytest plugin to test a projection against the real local stack.

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
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from contracts import EventEnvelope
from spectral import devstack
from spectral.cli.deployments import handler_factory
from spectral.db.migrate import migrate
from spectral.devstack import Endpoints
from spectral.dlq.records import DeadLetterRecord, scan_dead_letters
from spectral.engine.engine import ConsumerEngine, EngineOptions, RunSummary
from spectral.engine.handler import Handler
from spectral.kafka.topics import dlq_topic, topic_for
from spectral.outbox.relay import OutboxRelay, RelayMetrics, RelayOptions
from spectral.outbox.writer import OutboxItem, enqueue
from spectral.plugins import installed_registry
from spectral.replay.rebuild import rebuild
from spectral.replay.replay import ReplayReport
from spectral.settings import Settings, load_settings

__all__ = ["DeadLetterRecord", "Harness"]


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
def spectral_template(spectral_stack: Endpoints) -> Iterator[str]:
    """A database migrated once (spectral's track and the installed plugins'), cloned per test."""
    name = f"spectral_tpl_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    url = spectral_stack.database_url
    asyncio.run(_admin(url, f'CREATE DATABASE "{name}"'))
    try:
        asyncio.run(migrate(_with_database(url, name)))
        yield name
    finally:
        asyncio.run(_admin(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def spectral_database_url(spectral_stack: Endpoints, spectral_template: str) -> Iterator[str]:
    """A fresh, migrated database of the test's own, dropped afterwards."""
    name = _unique("spectral_t_")
    url = spectral_stack.database_url
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
