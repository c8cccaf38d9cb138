"""A private 3-broker Kafka cluster (KRaft) for the tests of this folder, shared by the session.

Started once, lazily, by the first test that needs it, in a temporary state directory of its own
(never the shared stack), and stopped and wiped once the last test that needs it is done: its
three brokers would otherwise idle beside the rest of the session (about a tenth of a core and
1.5 GB between them). Its tests run one after another (one xdist group, tests/conftest.py); a
test that needs it after that starts a new one in the same directory. Every test gets it
whole: the ``cluster`` fixture starts any broker a previous test left down and waits until every
replica is back in sync, before and after the test. The session's PostgreSQL server is used as
usual (each test its own database); only Kafka is faulted here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from spectral.devstack.kafka_cluster import LocalKafkaCluster
from spectral.devstack.kafka_jars import default_cache_dir
from spectral.errors import TransientError
from tests.cluster.support import BROKERS, healed

_STARTED: list[LocalKafkaCluster] = []
"""The session's cluster once started (stopped early by ``pytest_runtest_teardown``)."""


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafkaCluster]:
    # Its ports are picked free before the brokers bind them; with the suite's other workers
    # starting servers at the same moment one may be taken in between, and that broker exits:
    # a second start, in a new directory, picks new ports.
    for attempt in (1, 2):
        cluster = LocalKafkaCluster(
            tmp_path_factory.mktemp("kafka-cluster"),
            default_cache_dir(),
            brokers=BROKERS,
            short_lived=True,
        )
        try:
            cluster.ensure_running()
            break
        except TransientError:
            cluster.stop(wipe=True)
            if attempt == 2:
                raise
    _STARTED.append(cluster)
    try:
        yield cluster
    finally:
        _STARTED.clear()
        cluster.stop(wipe=True)


@pytest.hookimpl(trylast=True)  # after the test's own fixtures (``cluster`` heals it) are torn down
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop the cluster as soon as the next test of this process does not use it."""
    del item
    if nextitem is not None and "kafka_cluster" in getattr(nextitem, "fixturenames", ()):
        return
    while _STARTED:
        _STARTED.pop().stop(wipe=True)


@pytest.fixture
async def cluster(kafka_cluster: LocalKafkaCluster) -> AsyncIterator[LocalKafkaCluster]:
    """The session's cluster with every broker up and every replica in sync."""
    await healed(kafka_cluster)
    yield kafka_cluster
    await healed(kafka_cluster)


@pytest.fixture
def kafka_bootstrap(cluster: LocalKafkaCluster) -> str:
    """Overrides the session broker: settings and `spectral` subprocesses use the cluster."""
    bootstrap = cluster.bootstrap
    assert bootstrap is not None
    return bootstrap
