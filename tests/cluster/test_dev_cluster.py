"""`spectral dev` and `spectral topics` on the 3-broker cluster, as a user types them.

The session's cluster was started by ``LocalKafkaCluster`` in a state directory of its own; the
commands find it there (``SPECTRAL_STATE_DIR``): ``dev status`` lists every broker, ``dev up``
reuses it and exports every broker's address, ``dev up --brokers 1`` is refused (a state
directory keeps its size), and ``topics apply`` declares replication 3 and
``min.insync.replicas=2`` for every topic, internal ones included.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from spectral.devstack.kafka_cluster import LocalKafkaCluster
from tests.cluster.support import BROKERS, SPECTRAL

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


def _spectral(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SPECTRAL, *args], env=env, capture_output=True, text=True, check=False, timeout=120
    )


async def test_dev_commands_find_the_cluster_and_topics_get_three_replicas(
    cluster: LocalKafkaCluster, database_url: str, topic_prefix: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECTRAL_")}
    env |= {
        "XDG_STATE_HOME": str(tmp_path / "xdg"),  # `dev up` remembers its stack there
        "SPECTRAL_STATE_DIR": str(cluster.state_dir),
        "SPECTRAL_DATABASE_URL": database_url,  # no local PostgreSQL for this state directory
        "SPECTRAL_TOPIC_PREFIX": topic_prefix,
    }
    bootstrap = cluster.bootstrap
    assert bootstrap is not None
    assert len(bootstrap.split(",")) == BROKERS

    status = _spectral(env, "dev", "status")
    assert status.returncode == 0, status.stderr
    assert f"running {BROKERS} of {BROKERS} brokers" in status.stdout, status.stdout
    assert bootstrap in status.stdout

    up = _spectral(env, "dev", "up")
    assert up.returncode == 0, up.stderr
    assert f"export SPECTRAL_KAFKA_BOOTSTRAP={bootstrap}" in up.stdout

    refused = _spectral(env, "dev", "up", "--brokers", "1")
    assert refused.returncode == 2, refused.stderr
    assert f"holds a {BROKERS}-broker Kafka cluster, not a single broker" in refused.stderr

    applied = _spectral(env, "topics", "apply")
    assert applied.returncode == 0, applied.stderr
    assert "replication=3" in applied.stdout
    assert "min.insync.replicas=2" in applied.stdout
    check = _spectral(env, "topics", "plan", "--check")
    assert check.returncode == 0, check.stdout

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        names = [n for n in await admin.list_topics() if n.startswith(topic_prefix)]
        described = await admin.describe_topics(names)
        resources = [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
        resources += [ConfigResource(ConfigResourceType.BROKER, str(n)) for n in (1, 2, 3)]
        configs = _configs(await admin.describe_configs(resources))
    finally:
        await admin.close()
    assert len(names) == 10  # five event types and their dead-letter topics
    for topic in described:
        assert {len(p["replicas"]) for p in topic["partitions"]} == {3}, topic
    assert {configs[name]["min.insync.replicas"] for name in names} == {"2"}
    # Auto-created and internal topics (consumer offsets, transactions) are replicated alike.
    for broker in ("1", "2", "3"):
        assert {
            key: configs[broker][key]
            for key in (
                "default.replication.factor",
                "min.insync.replicas",
                "offsets.topic.replication.factor",
                "transaction.state.log.replication.factor",
                "transaction.state.log.min.isr",
            )
        } == {
            "default.replication.factor": "3",
            "min.insync.replicas": "2",
            "offsets.topic.replication.factor": "3",
            "transaction.state.log.replication.factor": "3",
            "transaction.state.log.min.isr": "2",
        }


def _configs(responses: list[Any]) -> dict[str, dict[str, str]]:
    return {
        resource["resource_name"]: {
            entry["config_names"]: entry["config_value"] for entry in resource["config_entries"]
        }
        for response in responses
        for resource in response.to_object()["resources"]
    }
