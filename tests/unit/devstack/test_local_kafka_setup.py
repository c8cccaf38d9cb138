"""The local Kafka manager's set-up decisions and errors, without starting a JVM.

Each error must say what to do; these tests pin the remedy into the message.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spectral.devstack.kafka import KAFKA_VERSION, LocalKafka
from spectral.devstack.kafka_config import KafkaState
from spectral.devstack.kafka_jars import (
    default_cache_dir,
    find_java,
    kafka_home_jars,
    libs_fingerprint,
    maven_jars,
    package_file,
)
from spectral.errors import ConfigurationError, TransientError


def _jars(libs: Path, *names: str) -> None:
    libs.mkdir(parents=True)
    for name in names:
        (libs / name).write_bytes(b"")


def test_cache_dir_follows_spectral_then_xdg(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECTRAL_CACHE_DIR", "/x/cache")
    assert default_cache_dir() == Path("/x/cache")
    monkeypatch.delenv("SPECTRAL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", "/xdg")
    assert default_cache_dir() == Path("/xdg/spectral")


def test_the_pom_and_log_config_ship_with_the_package() -> None:
    assert b"<artifactId>kafka_2.13</artifactId>" in package_file("pom.xml")
    assert f"<kafka.version>{KAFKA_VERSION}</kafka.version>".encode() in package_file("pom.xml")
    assert b"${sys:kafka.logs.dir}/server.log" in package_file("log4j2.xml")


def test_kafka_home_libs_are_used_as_they_are(tmp_path: Path) -> None:
    _jars(tmp_path / "libs", "kafka_2.13-4.2.2.jar", "log4j-core-2.24.3.jar")
    jars = kafka_home_jars(tmp_path)
    assert (jars.libs_dir, jars.version, jars.log4j2) == (tmp_path / "libs", "4.2.2", True)


def test_kafka_home_without_a_broker_jar_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"KAFKA_HOME=.*not an unpacked Kafka"):
        kafka_home_jars(tmp_path)


def test_complete_cached_libs_skip_maven(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no mvn to run
    home = tmp_path / "kafka-4.3.1"
    names = ["kafka_2.13-4.3.1.jar", "log4j-core-2.24.3.jar"]
    _jars(home / "libs", *names)
    marker = {"fingerprint": libs_fingerprint(package_file("pom.xml"), "4.3.1"), "jars": names}
    (home / "libs.complete").write_text(json.dumps(marker))
    jars = maven_jars(tmp_path, "4.3.1")
    assert (jars.libs_dir, jars.version) == (home / "libs", "4.3.1")


def test_incomplete_libs_need_maven_and_its_absence_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    _jars(tmp_path / "kafka-4.3.1" / "libs", "kafka_2.13-4.3.1.jar")  # no marker: a broken copy
    with pytest.raises(ConfigurationError, match=r"apt-get install -y maven.*KAFKA_HOME"):
        maven_jars(tmp_path, "4.3.1")


def test_missing_java_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(ConfigurationError, match="openjdk-17-jre-headless"):
        find_java("4.3.1")


def test_too_old_java_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\necho 'openjdk version \"11.0.22\" 2024-01-16' >&2\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    with pytest.raises(ConfigurationError, match=r"needs Java 17\+.*openjdk-17"):
        find_java("4.3.1")
    assert find_java("3.9.1") == str(java)


def test_a_busy_remembered_port_is_a_configuration_error(tmp_path: Path, listening: int) -> None:
    kafka = LocalKafka(tmp_path / "state", tmp_path / "cache")
    kafka.layout.root.mkdir(parents=True)
    state = KafkaState(version="4.3.1", port=listening, controller_port=1, cluster_id="c")
    kafka.layout.state_file.write_text(state.to_json())
    with pytest.raises(ConfigurationError, match=rf"127.0.0.1:{listening}.*busy.*state.json"):
        kafka.ensure_running(timeout=5)


def test_a_busy_requested_port_is_a_configuration_error(tmp_path: Path, listening: int) -> None:
    kafka = LocalKafka(tmp_path / "state", tmp_path / "cache", port=listening)
    with pytest.raises(ConfigurationError, match="busy"):
        kafka.ensure_running(timeout=5)


def test_an_invalid_kafka_home_stops_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAFKA_HOME", str(tmp_path / "nowhere"))
    kafka = LocalKafka(tmp_path / "state", tmp_path / "cache")
    with pytest.raises(ConfigurationError, match="KAFKA_HOME"):
        kafka.ensure_running(timeout=5)
    assert not kafka.layout.pid_file.exists()


def test_nothing_started_reports_stopped_and_stops_quietly(tmp_path: Path) -> None:
    kafka = LocalKafka(tmp_path / "state", tmp_path / "cache")
    status = kafka.status()
    assert (status.running, status.pid, status.bootstrap) == (False, None, None)
    assert status.version == KAFKA_VERSION
    assert status.log_file == tmp_path / "state" / "kafka" / "logs" / "server.log"
    kafka.stop()
    with pytest.raises(TransientError, match="start it first"):
        kafka.pause()


def test_a_recycled_pid_is_not_taken_for_the_broker(tmp_path: Path) -> None:
    kafka = LocalKafka(tmp_path / "state", tmp_path / "cache")
    kafka.layout.root.mkdir(parents=True)
    kafka.layout.pid_file.write_text("1\n")  # alive, but not our broker
    assert kafka.status().running is False
    kafka.stop()  # must not signal pid 1
    assert not kafka.layout.pid_file.exists()
