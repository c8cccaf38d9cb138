"""The local cluster's bookkeeping, without starting a JVM: cluster.json, which Kafka a state
directory holds, and the refusals a user meets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spectral import devstack
from spectral.devstack.kafka import LocalKafka
from spectral.devstack.kafka_cluster import LocalKafkaCluster, NodeStatus, local_kafka
from spectral.devstack.kafka_config import (
    ClusterFile,
    KafkaPorts,
    KafkaState,
    QuorumNode,
    parse_cluster_file,
)
from spectral.errors import ConfigurationError


def _cluster(*ports: int) -> ClusterFile:
    nodes = tuple(
        QuorumNode(i + 1, KafkaPorts(ports[2 * i], ports[2 * i + 1]))
        for i in range(len(ports) // 2)
    )
    return ClusterFile("4.3.1", "abcdefghijklmnopqrstuv", nodes)


def test_the_cluster_file_round_trips_and_names_every_broker() -> None:
    cluster = _cluster(9001, 9002, 9003, 9004, 9005, 9006)
    assert parse_cluster_file(cluster.to_json()) == cluster
    assert cluster.bootstrap == "127.0.0.1:9001,127.0.0.1:9003,127.0.0.1:9005"
    assert json.loads(cluster.to_json())["brokers"] == 3


def _file(*nodes: dict[str, int]) -> str:
    return json.dumps({"version": "4.3.1", "cluster_id": "c", "nodes": list(nodes)})


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[]",
        '{"version": "4.3.1", "cluster_id": "c"}',
        _file(),
        _file({"node_id": 1, "broker": 1}),
        _file({"node_id": 1, "broker": 5, "controller": 5}),  # one port twice
        _file(
            {"node_id": 1, "broker": 5, "controller": 6},
            {"node_id": 1, "broker": 7, "controller": 8},  # one node twice
        ),
        _file({"node_id": 1, "broker": 70000, "controller": 6}),
        _file({"node_id": 0, "broker": 5, "controller": 6}),
    ],
)
def test_a_cluster_file_spectral_did_not_write_is_not_taken(text: str) -> None:
    assert parse_cluster_file(text) is None


def test_a_new_state_directory_gets_what_is_asked(tmp_path: Path) -> None:
    assert type(local_kafka(tmp_path, tmp_path)) is LocalKafka
    assert type(local_kafka(tmp_path, tmp_path, 1)) is LocalKafka
    cluster = local_kafka(tmp_path, tmp_path, 3)
    assert isinstance(cluster, LocalKafkaCluster)
    assert cluster.brokers == 3


def test_the_stack_of_a_checkout_runs_steady_state_brokers(tmp_path: Path) -> None:
    """`spectral dev up` (and the benchmark, which runs on that stack) never gets the tests'
    short-lived brokers: their speed once running is what the stack is measured by."""
    single = local_kafka(tmp_path / "one", tmp_path)
    assert isinstance(single, LocalKafka)
    assert not single.short_lived
    cluster = local_kafka(tmp_path / "three", tmp_path, 3)
    assert isinstance(cluster, LocalKafkaCluster)
    cluster._create()  # the cluster file its brokers are read from, as a first start writes it
    assert [cluster.broker(n).short_lived for n in (1, 2, 3)] == [False] * 3


def test_a_state_directory_keeps_its_size(tmp_path: Path) -> None:
    single = tmp_path / "single"
    LocalKafka(single, tmp_path).layout.root.mkdir(parents=True)
    state = KafkaState(version="4.3.1", port=1, controller_port=2, cluster_id="c")
    LocalKafka(single, tmp_path).layout.state_file.write_text(state.to_json())
    assert type(local_kafka(single, tmp_path)) is LocalKafka
    with pytest.raises(ConfigurationError, match="holds a single Kafka broker, not 3 brokers"):
        local_kafka(single, tmp_path, 3)

    three = tmp_path / "three"
    (three / "kafka").mkdir(parents=True)
    (three / "kafka" / "cluster.json").write_text(_cluster(1, 2, 3, 4, 5, 6).to_json())
    found = local_kafka(three, tmp_path)
    assert isinstance(found, LocalKafkaCluster)
    assert found.brokers == 3
    assert found.bootstrap == "127.0.0.1:1,127.0.0.1:3,127.0.0.1:5"
    assert isinstance(local_kafka(three, tmp_path, 3), LocalKafkaCluster)
    with pytest.raises(ConfigurationError, match="3-broker Kafka cluster, not a single broker"):
        local_kafka(three, tmp_path, 1)
    with pytest.raises(ConfigurationError, match="has 3 brokers, not 5"):
        LocalKafkaCluster(three, tmp_path, brokers=5).ensure_running(timeout=1)


def test_a_broken_cluster_file_says_how_to_start_over(tmp_path: Path) -> None:
    (tmp_path / "kafka").mkdir()
    (tmp_path / "kafka" / "cluster.json").write_text("{not json")
    with pytest.raises(ConfigurationError, match="dev down --wipe"):
        LocalKafkaCluster(tmp_path, tmp_path).status()


@pytest.mark.parametrize("brokers", [0, 10])
def test_the_size_is_bounded(tmp_path: Path, brokers: int) -> None:
    with pytest.raises(ConfigurationError, match="1 to 9 brokers"):
        LocalKafkaCluster(tmp_path, tmp_path, brokers=brokers)


def test_nothing_started_reports_stopped_and_stops_quietly(tmp_path: Path) -> None:
    cluster = LocalKafkaCluster(tmp_path, tmp_path)
    status = cluster.status()
    assert (status.running, status.pid, status.bootstrap) == (False, None, None)
    assert cluster.node_status() == []
    assert cluster.bootstrap is None
    cluster.stop()
    with pytest.raises(ConfigurationError, match="start it first"):
        cluster.broker(1)


def test_a_busy_port_of_a_broker_is_a_configuration_error(tmp_path: Path, listening: int) -> None:
    (tmp_path / "kafka").mkdir()
    cluster_file = _cluster(listening, 2, 3, 4, 5, 6)
    (tmp_path / "kafka" / "cluster.json").write_text(cluster_file.to_json())
    with pytest.raises(ConfigurationError, match=rf"{listening} of local Kafka broker 1 is busy"):
        LocalKafkaCluster(tmp_path, tmp_path / "cache").ensure_running(timeout=5)
    assert not (tmp_path / "kafka" / "broker-1" / "kafka.pid").exists()


def test_dev_status_names_a_stopped_broker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "kafka").mkdir()
    (tmp_path / "kafka" / "cluster.json").write_text(_cluster(1, 2, 3, 4, 5, 6).to_json())
    cluster = LocalKafkaCluster(tmp_path, tmp_path)
    log = tmp_path / "server.log"
    nodes = [
        NodeStatus(1, running=True, pid=101, address="127.0.0.1:1", log_file=log),
        NodeStatus(2, running=False, pid=None, address="127.0.0.1:3", log_file=log),
        NodeStatus(3, running=True, pid=103, address="127.0.0.1:5", log_file=log),
    ]
    monkeypatch.setattr(LocalKafkaCluster, "node_status", lambda _self: nodes)
    text = devstack._describe_kafka(cluster)
    assert text.startswith("degraded, broker 2 stopped: 2 of 3 brokers (1: pid 101, 3: pid 103)")
    assert "at 127.0.0.1:1,127.0.0.1:3,127.0.0.1:5" in text
    monkeypatch.setattr(LocalKafkaCluster, "node_status", lambda _self: nodes[1:2])
    assert devstack._describe_kafka(cluster) == "stopped (1 brokers)"
