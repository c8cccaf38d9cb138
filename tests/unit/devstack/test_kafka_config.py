"""The pure parts of the local Kafka broker: server.properties, the state file, versions."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from spectral.devstack.kafka_config import (
    KAFKA_MAIN,
    ClassArchive,
    KafkaLayout,
    KafkaPorts,
    KafkaState,
    QuorumNode,
    class_archive_check,
    class_archive_name,
    java_major_version,
    jvm_command,
    kafka_version_of,
    new_cluster_id,
    parse_state,
    render_server_properties,
    replication_settings,
    required_java,
    storage_format_args,
    uses_log4j2,
)


def _properties(text: str) -> dict[str, str]:
    lines = (line.partition("=") for line in text.splitlines() if line and line[0] != "#")
    return {key: value for key, _, value in lines}


def test_server_properties_describe_one_loopback_node_that_is_broker_and_controller() -> None:
    props = _properties(
        render_server_properties(KafkaPorts(broker=19092, controller=19093), Path("/s/kafka/data"))
    )
    assert props["process.roles"] == "broker,controller"
    assert props["node.id"] == "1"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert props["controller.listener.names"] == "CONTROLLER"
    assert props["log.dirs"] == "/s/kafka/data"


def test_server_properties_fit_a_single_node() -> None:
    props = _properties(render_server_properties(KafkaPorts(1, 2), Path("/d")))
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["transaction.state.log.replication.factor"] == "1"
    assert props["transaction.state.log.min.isr"] == "1"
    assert props["num.partitions"] == "3"
    assert props["auto.create.topics.enable"] == "true"
    assert props["group.initial.rebalance.delay.ms"] == "0"


def test_a_backslash_in_the_data_path_is_escaped_for_java_properties() -> None:
    props = _properties(render_server_properties(KafkaPorts(1, 2), Path("/a\\b")))
    assert props["log.dirs"] == "/a\\\\b"


def test_state_round_trips_through_json() -> None:
    state = KafkaState(version="4.3.1", port=1234, controller_port=1235, cluster_id="abc", pid=42)
    assert parse_state(state.to_json()) == state
    assert state.bootstrap == "127.0.0.1:1234"
    assert state.ports == KafkaPorts(1234, 1235)
    assert parse_state(state.with_pid(None).to_json()) == state.with_pid(None)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "[]",
        '{"version": "4.3.1"}',
        '{"version": "4.3.1", "port": 70000, "controller_port": 1, "cluster_id": "c"}',
        '{"version": "4.3.1", "port": "1", "controller_port": 2, "cluster_id": "c"}',
        '{"version": "4.3.1", "port": 1, "controller_port": 2, "cluster_id": "c", "pid": 0}',
        '{"version": "4.3.1", "port": 1, "controller_port": 2, "cluster_id": "c", "pid": true}',
        '{"version": "", "port": 1, "controller_port": 2, "cluster_id": "c"}',
    ],
)
def test_a_state_file_this_code_did_not_write_is_ignored(text: str) -> None:
    assert parse_state(text) is None


def test_cluster_ids_look_like_kafka_uuids() -> None:
    ids = {new_cluster_id() for _ in range(50)}
    assert len(ids) == 50
    for cluster_id in ids:
        assert len(cluster_id) == 22
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


def test_cluster_ids_never_start_with_a_dash() -> None:
    # One id in 64 would: the storage tool would read it as an option and refuse to format.
    assert not any(new_cluster_id().startswith("-") for _ in range(2000))


def test_kafka_version_comes_from_the_broker_jar() -> None:
    names = ["kafka-clients-4.3.1.jar", "kafka_2.13-4.3.1.jar", "scala-library-2.13.16.jar"]
    assert kafka_version_of(names) == "4.3.1"
    assert kafka_version_of(["kafka_2.13-3.9.1.jar"]) == "3.9.1"
    assert kafka_version_of(["kafka_2.13-4.3.1-test.jar", "kafka-clients-4.3.1.jar"]) is None


@pytest.mark.parametrize(
    ("output", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment', 17),
        ('openjdk version "21" 2023-09-19', 21),
        ('java version "1.8.0_402"', 8),
        ("no java here", None),
    ],
)
def test_java_major_version(output: str, major: int | None) -> None:
    assert java_major_version(output) == major


def test_kafka_4_needs_java_17_and_kafka_3_java_11() -> None:
    assert required_java("4.3.1") == 17
    assert required_java("3.9.1") == 11


def test_jvm_command_runs_the_main_class_on_the_libs_with_the_log_config() -> None:
    layout = KafkaLayout(Path("/s/kafka"))
    command = jvm_command(
        "/usr/bin/java",
        Path("/c/libs"),
        KAFKA_MAIN,
        [str(layout.properties)],
        logs_dir=layout.logs_dir,
        log_config=layout.log4j2_config,
    )
    assert command[0] == "/usr/bin/java"
    assert "-Xmx512m" in command
    assert "-Dlog4j2.configurationFile=/s/kafka/log4j2.xml" in command
    assert "-Dkafka.logs.dir=/s/kafka/logs" in command
    assert command[-4:] == ["-cp", "/c/libs/*", "kafka.Kafka", "/s/kafka/server.properties"]
    log4j1 = jvm_command(
        "java", Path("/l"), KAFKA_MAIN, [], logs_dir=Path("/o"), log_config=layout.log4j1_config
    )
    assert "-Dlog4j.configuration=file:///s/kafka/log4j.properties" in log4j1


def test_only_a_short_lived_jvm_stops_at_c1_and_collects_serially() -> None:
    def options(*, short_lived: bool) -> list[str]:
        command = jvm_command(
            "java",
            Path("/l"),
            KAFKA_MAIN,
            [],
            logs_dir=Path("/o"),
            log_config=Path("/s/log4j2.xml"),
            short_lived=short_lived,
        )
        return command[1 : command.index("-cp")]

    quick, steady = options(short_lived=True), options(short_lived=False)
    assert "-XX:TieredStopAtLevel=1" in quick
    assert "-XX:+UseSerialGC" in quick
    assert not [o for o in quick if "G1" in o]
    assert not [o for o in steady if "TieredStopAtLevel" in o or "SerialGC" in o]
    assert "-XX:+UseG1GC" in steady
    for shared in ("-Xmx512m", "-XX:+ExitOnOutOfMemoryError", "-Dspectral.devstack=kafka"):
        assert shared in quick
        assert shared in steady


def test_a_short_lived_jvm_maps_or_records_the_class_archive_and_no_other_does() -> None:
    def command(archive: ClassArchive, *, short_lived: bool = True) -> list[str]:
        return jvm_command(
            "java",
            Path("/l"),
            KAFKA_MAIN,
            [],
            logs_dir=Path("/o"),
            log_config=Path("/s/log4j2.xml"),
            short_lived=short_lived,
            class_archive=archive,
        )

    mapped = command(ClassArchive(Path("/c/k.jsa")))
    assert "-XX:SharedArchiveFile=/c/k.jsa" in mapped
    assert not [a for a in mapped if "ArchiveClassesAtExit" in a]
    recording = command(ClassArchive(Path("/c/k.part"), record=True))
    assert "-XX:ArchiveClassesAtExit=/c/k.part" in recording
    assert not [a for a in recording if "SharedArchiveFile" in a]
    with pytest.raises(ValueError, match="short-lived"):
        command(ClassArchive(Path("/c/k.jsa")), short_lived=False)
    check = class_archive_check("java", "/l/*", Path("/c/k.part"))
    assert check[-5:] == [
        "-Xshare:on",
        "-XX:SharedArchiveFile=/c/k.part",
        "-cp",
        "/l/*",
        "-version",
    ]


def test_the_class_archive_is_named_for_its_jdk_and_jars() -> None:
    stamps = ["/usr/lib/jvm/17/bin/java", "/c/libs", "/c/libs/kafka_2.13-4.3.1.jar:10:1"]
    name = class_archive_name("4.3.1", stamps)
    assert name.startswith("kafka-4.3.1-")
    assert name.endswith(".jsa")
    assert class_archive_name("4.3.1", stamps) == name
    assert class_archive_name("4.3.1", [*stamps[:2], "/c/libs/kafka_2.13-4.3.1.jar:10:2"]) != name
    assert class_archive_name("4.3.1", ["/usr/lib/jvm/21/bin/java", *stamps[1:]]) != name


def test_storage_is_formatted_once_with_the_cluster_id() -> None:
    args = storage_format_args(Path("/s/server.properties"), "abc")
    assert args == [
        "format",
        "--cluster-id",
        "abc",
        "--config",
        "/s/server.properties",
        "--ignore-formatted",
    ]


def test_log4j2_is_recognised_by_its_core_jar() -> None:
    assert uses_log4j2(["log4j-api-2.24.3.jar", "log4j-core-2.24.3.jar"])
    assert not uses_log4j2(["reload4j-1.2.25.jar", "slf4j-reload4j-1.7.36.jar"])


def test_a_node_of_a_cluster_names_every_voter_and_replicates_three_ways() -> None:
    quorum = tuple(QuorumNode(n, KafkaPorts(9000 + 2 * n, 9001 + 2 * n)) for n in (1, 2, 3))
    props = _properties(
        render_server_properties(quorum[1].ports, Path("/d"), node_id=2, quorum=quorum)
    )
    assert props["node.id"] == "2"
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == (
        "1@127.0.0.1:9003,2@127.0.0.1:9005,3@127.0.0.1:9007"
    )
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9004,CONTROLLER://127.0.0.1:9005"
    assert props["default.replication.factor"] == "3"
    assert props["min.insync.replicas"] == "2"
    assert props["offsets.topic.replication.factor"] == "3"
    assert props["transaction.state.log.replication.factor"] == "3"
    assert props["transaction.state.log.min.isr"] == "2"


@pytest.mark.parametrize(
    ("brokers", "factor", "min_isr"), [(1, "1", "1"), (2, "2", "1"), (3, "3", "2"), (5, "3", "2")]
)
def test_replication_follows_the_topic_rule(brokers: int, factor: str, min_isr: str) -> None:
    settings = dict(replication_settings(brokers))
    assert settings["default.replication.factor"] == factor
    assert settings["offsets.topic.replication.factor"] == factor
    assert settings["min.insync.replicas"] == min_isr
    assert settings["transaction.state.log.min.isr"] == min_isr


def test_every_key_is_written_once() -> None:
    quorum = tuple(QuorumNode(n, KafkaPorts(n, 10 + n)) for n in (1, 2, 3))
    for text in (
        render_server_properties(KafkaPorts(1, 2), Path("/d")),
        render_server_properties(KafkaPorts(1, 11), Path("/d"), node_id=1, quorum=quorum),
    ):
        keys = [line.partition("=")[0] for line in text.splitlines() if line[:1] != "#"]
        assert len(keys) == len(set(keys))
