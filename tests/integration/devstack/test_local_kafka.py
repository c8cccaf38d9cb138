"""The local Kafka manager against a real broker of its own (not the session's stack).

It shares the jar cache with everything else, so only the first run on a machine fetches jars.
The broker's state lives in a temporary directory and is wiped at the end; no process may be
left behind.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from spectral.devstack.kafka import KAFKA_VERSION, LocalKafka
from spectral.devstack.kafka_config import NODE_ID
from spectral.devstack.kafka_jars import default_cache_dir
from spectral.devstack.kafka_probe import probe
from spectral.devstack.process import pid_alive
from spectral.errors import ConfigurationError, TransientError
from tests.support import unique_name

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    # A cache of its own (the jars linked from the shared one): the class archive its
    # short-lived JVMs record and map is this module's, whatever other tests' brokers do.
    cache = tmp_path_factory.mktemp("local-kafka-cache")
    jars = f"kafka-{KAFKA_VERSION}"
    (cache / jars).symlink_to(default_cache_dir() / jars, target_is_directory=True)
    manager = LocalKafka(tmp_path_factory.mktemp("local-kafka"), cache, short_lived=True)
    try:
        yield manager
    finally:
        pid = manager.status().pid
        manager.stop(wipe=True)
        assert not pid_alive(pid)
        assert not manager.layout.data_dir.exists()


def _gone(pid: int | None) -> bool:
    """The pid has exited (a zombie still waiting for its parent's reaper counts as gone)."""
    deadline = time.monotonic() + 5
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


async def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, value, partition=0)
    finally:
        await producer.stop()


async def _consume(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=unique_name("g"),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        seen: list[bytes] = []
        async with asyncio.timeout(30):
            while len(seen) < count:
                batches = await consumer.getmany(timeout_ms=500)
                seen.extend(r.value for records in batches.values() for r in records)
        await consumer.commit()
    finally:
        await consumer.stop()
    return seen


def test_ensure_running_twice_reuses_the_broker(kafka: LocalKafka) -> None:
    first = kafka.ensure_running()
    status = kafka.status()
    again = kafka.ensure_running()
    assert again == first
    assert kafka.status() == status
    assert status.running
    assert status.bootstrap == first
    assert first.startswith("127.0.0.1:")
    assert status.version == KAFKA_VERSION
    assert status.pid is not None
    assert pid_alive(status.pid)
    assert status.log_file.is_file()
    assert kafka.layout.pid_file.read_text().strip() == str(status.pid)


async def test_produce_and_consume_round_trip(kafka: LocalKafka) -> None:
    bootstrap = kafka.ensure_running()
    topic = unique_name("roundtrip.")
    values = [f"m{i}".encode() for i in range(20)]
    await _produce(bootstrap, topic, values)
    assert await _consume(bootstrap, topic, len(values)) == values


async def test_stop_then_start_keeps_the_port_and_the_data(kafka: LocalKafka) -> None:
    bootstrap = kafka.ensure_running()
    topic = unique_name("kept.")
    await _produce(bootstrap, topic, [b"before-stop"])
    pid = kafka.status().pid

    kafka.stop()
    assert _gone(pid)
    assert not kafka.layout.pid_file.exists()
    assert kafka.status().running is False

    assert kafka.start() == bootstrap
    assert kafka.status().pid != pid
    assert await _consume(bootstrap, topic, 1) == [b"before-stop"]
    # The first of these short-lived brokers recorded its classes as it stopped; every start
    # after that maps them.
    [archive] = (kafka.cache_dir / "class-archives").glob("*.jsa")
    assert f"-XX:SharedArchiveFile={archive}" in _argv(kafka.status().pid)


def test_a_torn_class_archive_is_dropped_not_used(kafka: LocalKafka) -> None:
    """A broker killed while it writes the class archive as it exits leaves it torn, and a torn
    archive crashes every JVM that maps it: a recorded archive is used only once a JVM has
    mapped it."""
    kafka.ensure_running()
    archives = kafka.cache_dir / "class-archives"
    if not list(archives.glob("*.jsa")):
        kafka.stop()  # the broker records its classes as it stops
        kafka.start()
    [archive] = archives.glob("*.jsa")
    before = archive.read_bytes()
    argv = _argv(kafka.status().pid)
    torn = archive.with_suffix(".part")
    torn.write_bytes(before[: len(before) // 2])
    # As a broker that records it notes it: where, and the java and class path it runs with.
    note = f"{torn}\n{argv[0]}\n{argv[argv.index('-cp') + 1]}\n"
    kafka.layout.class_archive_note.write_text(note, encoding="utf-8")
    kafka.stop()
    assert not torn.exists()
    assert not kafka.layout.class_archive_note.exists()
    assert archive.read_bytes() == before
    kafka.start()
    assert f"-XX:SharedArchiveFile={archive}" in _argv(kafka.status().pid)


async def test_a_killed_broker_restarts_with_its_data(kafka: LocalKafka) -> None:
    bootstrap = kafka.ensure_running()
    topic = unique_name("crash.")
    await _produce(bootstrap, topic, [b"before-kill"])
    pid = kafka.status().pid

    kafka.kill()
    assert _gone(pid)
    assert kafka.status().running is False

    assert kafka.ensure_running() == bootstrap
    assert await _consume(bootstrap, topic, 1) == [b"before-kill"]


def test_a_paused_broker_does_not_answer_until_resumed(kafka: LocalKafka) -> None:
    bootstrap = kafka.ensure_running()
    port = int(bootstrap.rsplit(":", 1)[1])
    kafka.pause()
    try:
        assert not probe("127.0.0.1", port, NODE_ID, timeout=0.5).ready
    finally:
        kafka.resume()
    assert probe("127.0.0.1", port, NODE_ID).ready


def test_concurrent_starts_start_one_broker(kafka: LocalKafka) -> None:
    kafka.stop()
    results: list[str] = []
    threads = [
        threading.Thread(target=lambda: results.append(kafka.ensure_running())) for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=180)
    assert len(results) == 3
    assert len(set(results)) == 1
    running = [
        line
        for line in Path("/proc").glob("[0-9]*/cmdline")
        if _is_broker_of(line, kafka.layout.properties)
    ]
    assert len(running) == 1


def _argv(pid: int | None) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def _is_broker_of(cmdline: Path, properties: Path) -> bool:
    try:
        argv = cmdline.read_bytes().split(b"\0")
    except OSError:
        return False
    return b"kafka.Kafka" in argv and str(properties).encode() in argv


def test_fresh_starts_over_with_empty_storage(kafka: LocalKafka) -> None:
    kafka.ensure_running()
    old_cluster = kafka.layout.meta_properties.read_text()
    old_pid = kafka.status().pid
    kafka.ensure_running(fresh=True)
    assert _gone(old_pid)
    assert kafka.status().running
    assert kafka.layout.meta_properties.read_text() != old_cluster


def test_a_broker_that_cannot_start_reports_its_log(tmp_path: Path) -> None:
    manager = LocalKafka(tmp_path, default_cache_dir(), short_lived=True)
    manager.ensure_running()
    manager.stop()
    meta = manager.layout.meta_properties
    meta.write_text(meta.read_text().replace("node.id=1", "node.id=7"))
    with pytest.raises(TransientError, match=r"Kafka did not come up.*exited") as raised:
        manager.ensure_running(timeout=60)
    message = str(raised.value)
    assert str(manager.layout.log_file) in message
    assert "node" in message.split("Last lines of", 1)[1].lower()
    assert not manager.layout.pid_file.exists()
    assert manager.status().running is False
    manager.stop(wipe=True)


def test_a_kafka_home_that_cannot_format_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "dist" / "libs").mkdir(parents=True)
    (tmp_path / "dist" / "libs" / "kafka_2.13-4.3.1.jar").write_bytes(b"")
    monkeypatch.setenv("KAFKA_HOME", str(tmp_path / "dist"))
    manager = LocalKafka(tmp_path / "state", tmp_path / "cache")
    with pytest.raises(ConfigurationError, match="Formatting the Kafka storage failed"):
        manager.ensure_running(timeout=60)
    assert manager.status().running is False
