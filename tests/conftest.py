"""Fixtures: a real Kafka broker and a real PostgreSQL server for the whole session.

Where they come from, in order: (a) SPECTRAL_KAFKA_BOOTSTRAP / SPECTRAL_DATABASE_URL when set;
(b) testcontainers when a Docker engine answers; (c) the local stack (`spectral dev up`). When
none can be had the tests that need them FAIL — they are never skipped.

Each test gets its own database (cloned from a migrated template, so it is cheap) and its own
topic prefix, so tests never see each other's data.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import hypothesis
import pytest

from spectral import devstack
from spectral.db.migrate import migrate
from spectral.devstack import Endpoints
from spectral.settings import Settings, load_settings
from tests import reaper
from tests.support import unique_name, with_database

# Property tests are judged by what they find, never by how fast a loaded machine generates or
# runs their examples: no deadline and no "too slow" health check (tests may still set their own
# example counts).
hypothesis.settings.register_profile(
    "spectral", deadline=None, suppress_health_check=[hypothesis.HealthCheck.too_slow]
)
hypothesis.settings.load_profile("spectral")


def _docker_answers() -> bool:
    try:
        import docker  # noqa: PLC0415

        docker.from_env(timeout=2).ping()
    except Exception:  # noqa: BLE001 - any failure means "no engine"
        return False
    return True


@pytest.fixture(scope="session", autouse=True)
def _reaped(tmp_path_factory: pytest.TempPathFactory) -> None:
    """What this test process starts dies with it, even when it is killed (tests/reaper.py)."""
    reaper.start(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="session")
def stack() -> Iterator[Endpoints]:
    """Kafka bootstrap and an admin database URL for the session."""
    base = load_settings()
    if base.kafka_bootstrap and base.database_url:
        yield Endpoints(base.kafka_bootstrap, base.database_url.get_secret_value())
        return
    if os.environ.get("SPECTRAL_TEST_DOCKER", "auto") != "never" and _docker_answers():
        from testcontainers.kafka import KafkaContainer  # noqa: PLC0415
        from testcontainers.postgres import PostgresContainer  # noqa: PLC0415

        with KafkaContainer().with_kraft() as kafka, PostgresContainer("postgres:15") as pg:
            url = pg.get_connection_url().replace("postgresql+psycopg2", "postgresql")
            yield Endpoints(kafka.get_bootstrap_server(), url)
        return
    try:
        with (
            reaper.unowned()
        ):  # the checkout's stack is reused by the next run; `make test` stops it
            endpoints = devstack.up(base)
    except Exception as exc:  # noqa: BLE001
        pytest.fail(
            f"no Kafka/PostgreSQL for the tests and the local stack could not start: {exc}",
            pytrace=False,
        )
    yield endpoints


@pytest.fixture(scope="session")
async def template_database(stack: Endpoints) -> AsyncIterator[str]:
    """A migrated database that every test database is cloned from."""
    name = f"spectral_tpl_{os.getpid()}"
    admin = await asyncpg.connect(with_database(stack.database_url, "postgres"))
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        await admin.execute(f'CREATE DATABASE "{name}"')
        await migrate(with_database(stack.database_url, name))
        await _compact_catalogs(with_database(stack.database_url, name))
        yield name
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def _compact_catalogs(url: str) -> None:
    """Rewrite the database's own system catalogs without the dead rows the migrations' DDL left
    (~14 % of its pages): each test database is a block-by-block copy of the template, the
    biggest cost of a test's database (~11 % less CPU per copy). Its tables are left as the
    migrations made them (never vacuumed, no statistics), as a new database's are."""
    conn = await asyncpg.connect(url)
    try:
        catalogs = await conn.fetch(
            "SELECT c.oid::regclass::text AS name FROM pg_class c"
            " WHERE c.relnamespace = 'pg_catalog'::regnamespace AND c.relkind = 'r'"
            " AND NOT c.relisshared"
        )
        await conn.execute("VACUUM FULL " + ", ".join(row["name"] for row in catalogs))
    finally:
        await conn.close()


@pytest.fixture
async def database_url(stack: Endpoints, template_database: str) -> AsyncIterator[str]:
    """A fresh, migrated database of the test's own, dropped afterwards."""
    name = unique_name("spectral_t_")
    admin = await asyncpg.connect(with_database(stack.database_url, "postgres"))
    try:
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_database}"')
        yield with_database(stack.database_url, name)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@pytest.fixture
def kafka_bootstrap(stack: Endpoints) -> str:
    return stack.kafka_bootstrap


@pytest.fixture
def topic_prefix() -> str:
    """A unique topic prefix per test: topics never collide across tests or runs."""
    return unique_name("t") + "."


@pytest.fixture
def settings_factory(
    kafka_bootstrap: str, database_url: str, topic_prefix: str
) -> Callable[..., Settings]:
    """Settings pointing at this test's database, the session's broker and a unique prefix."""

    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "kafka_bootstrap": kafka_bootstrap,
            "database_url": database_url,
            "topic_prefix": topic_prefix,
        }
        values.update(overrides)
        return load_settings(**values)

    return make


@pytest.fixture
def settings(settings_factory: Callable[..., Settings]) -> Settings:
    return settings_factory()


@pytest.fixture
def spectral_env(settings: Settings) -> dict[str, str]:
    """Environment for running `spectral` subprocesses against this test's stack."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECTRAL_")}
    env.update(
        {
            "SPECTRAL_KAFKA_BOOTSTRAP": settings.kafka_bootstrap or "",
            "SPECTRAL_DATABASE_URL": settings.database_url.get_secret_value()
            if settings.database_url
            else "",
            "SPECTRAL_TOPIC_PREFIX": settings.topic_prefix,
            "SPECTRAL_LOG_FORMAT": "json",
        }
    )
    return env


# Tests that share a resource bigger than one test run in one parallel worker (`--dist loadgroup`):
# the private 3-broker cluster (a session fixture), the private brokers of test_local_kafka and of
# the broker-outage fault tests (module fixtures: only the tests that use them) and the compose
# logins (roles are server-wide). Path prefix -> (group, the fixture they share, or None for every
# test of the path).
_GROUPS: dict[str, tuple[str, str | None]] = {
    "tests/cluster/": ("kafka-cluster", None),
    "tests/integration/devstack/test_local_kafka.py": ("local-kafka", "kafka"),
    "tests/faults/engine/test_consumer_faults.py": ("outage-broker", "outage_broker"),
    "tests/integration/test_compose_logins.py": ("compose-logins", None),  # server-wide logins
}

# The slowest tests (30 s to 3 min each, waiting on brokers, servers and subprocesses) start first:
# xdist hands work out in collection order (groups first, the largest first), so a slow test
# collected late runs on while the other workers have nothing left to do.
_SLOW_FIRST = (
    "tests/integration/test_wheel_install.py",
    "tests/faults/observability/test_outage_visibility.py",
    "tests/faults/engine/test_consumer_faults.py",
    "tests/faults/engine/test_hostile_corpus.py",
    "tests/faults/work_executor/test_outage.py",
    "tests/integration/work/test_cli.py",
    "tests/faults/engine/test_frozen_member.py",
    "tests/integration/dlq/test_dlq.py",
    "tests/faults/clusters/test_stub_kill.py",
)


# The Helm chart's tests need helm and kubeconform, which `make test` compiles beside pytest (a
# cold compile takes minutes): they come right after the slowest tests, and each waits for the
# compile to end when it has not (HELM_BINARIES_STATUS names the file the Makefile writes its exit
# status to), outside its timeout. A failed compile leaves the binaries missing, which the tests
# report (tests/helm/chart.py), and fails `make test` with the compile's log.
_HELM = "tests/helm/"
HELM_BINARIES_WAIT = 1800.0


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups into node ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        for prefix, (group, fixture) in _GROUPS.items():
            uses = fixture is None or fixture in getattr(item, "fixturenames", ())
            if path.startswith(prefix) and uses:
                item.add_marker(pytest.mark.xdist_group(group))
    items.sort(
        key=lambda item: (
            0 if item.nodeid.startswith(_SLOW_FIRST) else 1 if item.nodeid.startswith(_HELM) else 2
        )
    )


def _await_helm_binaries() -> None:
    status = os.environ.get("HELM_BINARIES_STATUS")
    if not status:
        return
    deadline = time.monotonic() + HELM_BINARIES_WAIT
    while not Path(status).exists() and time.monotonic() < deadline:
        time.sleep(1)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)  # outside pytest-timeout's clock
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None]:
    if item.nodeid.startswith(_HELM):
        _await_helm_binaries()
    yield
