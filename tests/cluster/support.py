"""Helpers of the cluster tests: the cluster's health, partition leaders, placed topics, and
`spectral` processes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from spectral.devstack.kafka_cluster import LocalKafkaCluster

BROKERS = 3
ROOT = Path(__file__).resolve().parents[2]
SPECTRAL = str(Path(sys.executable).with_name("spectral"))


async def _described(admin: AIOKafkaAdminClient, topics: Sequence[str]) -> list[dict[str, Any]]:
    """describe_topics, asked again when it picked a broker that is down (the admin client
    sends to any known broker)."""
    for attempt in range(50):
        try:
            described: list[dict[str, Any]] = await admin.describe_topics(list(topics))
        except KafkaError:
            if attempt == 49:
                raise
            await asyncio.sleep(0.2)
        else:
            return described
    raise AssertionError("unreachable")


async def in_sync(bootstrap: str, timeout: float = 120.0) -> None:
    """Wait until every partition of every topic has a leader and all its replicas in sync."""
    deadline = time.monotonic() + timeout
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        while True:
            lagging: list[str] = []
            try:
                names = await admin.list_topics()
                lagging.extend(
                    f"{topic['topic']}:{p['partition']}"
                    for topic in (await _described(admin, names) if names else [])
                    for p in topic.get("partitions", [])
                    if p["leader"] < 0 or sorted(p["isr"]) != sorted(p["replicas"])
                )
            except Exception as exc:  # noqa: BLE001 - a cluster in flux answers with errors
                lagging.append(f"({type(exc).__name__}: {exc})")
            if not lagging:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"replicas not in sync after {timeout}s: {lagging[:10]}")
            await asyncio.sleep(0.3)
    finally:
        await admin.close()


async def healed(cluster: LocalKafkaCluster) -> None:
    """Every broker running and every replica in sync (whatever a test left behind)."""
    bootstrap = await asyncio.to_thread(cluster.ensure_running)
    await in_sync(bootstrap)


@dataclass(frozen=True)
class Partition:
    topic: str
    partition: int
    end_offset: int
    leader: int


async def busiest_partition(bootstrap: str, topics: Sequence[str]) -> Partition:
    """The partition of ``topics`` holding the most records, with its current leader."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await consumer.start()
    await admin.start()
    try:
        described = await _described(admin, topics)
        leaders = {
            (t["topic"], p["partition"]): p["leader"]
            for t in described
            for p in t.get("partitions", [])
        }
        ends = await consumer.end_offsets([TopicPartition(t, p) for t, p in leaders])
    finally:
        await admin.close()
        await consumer.stop()
    tp, end = max(ends.items(), key=lambda item: item[1])
    return Partition(tp.topic, tp.partition, end, leaders[tp.topic, tp.partition])


async def coordinator_of(bootstrap: str, group: str) -> int:
    """The broker coordinating consumer group ``group`` (its offsets, its membership)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return int(await admin.find_coordinator(group))
    finally:
        await admin.close()


async def create_placed_topic(
    bootstrap: str, name: str, replicas: Sequence[int], config: Mapping[str, str]
) -> None:
    """A one-partition topic whose replicas live on exactly the brokers ``replicas`` (the first
    one preferred as leader); waits until they are all in sync."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        response = await admin.create_topics(
            [
                NewTopic(
                    name,
                    num_partitions=-1,
                    replication_factor=-1,
                    replica_assignments={0: list(replicas)},
                    topic_configs=dict(config),
                )
            ]
        )
        errors = [e for e in response.to_object()["topic_errors"] if e["error_code"]]
        assert not errors, errors
        deadline = time.monotonic() + 30
        while True:
            (topic,) = await _described(admin, [name])
            parts = topic.get("partitions", [])
            if parts and sorted(parts[0]["isr"]) == sorted(replicas):
                return
            assert time.monotonic() < deadline, f"{name} never got its replicas in sync: {topic}"
            await asyncio.sleep(0.2)
    finally:
        await admin.close()


async def isr_of(bootstrap: str, topic: str) -> list[int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (described,) = await _described(admin, [topic])
    finally:
        await admin.close()
    return sorted(described["partitions"][0]["isr"])


async def wait_isr(bootstrap: str, topic: str, expected: Sequence[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while (isr := await isr_of(bootstrap, topic)) != sorted(expected):
        assert time.monotonic() < deadline, f"{topic}: in-sync replicas {isr}, not {expected}"
        await asyncio.sleep(0.2)


def start_spectral(env: Mapping[str, str], log: Path, *args: str) -> subprocess.Popen[bytes]:
    """`spectral ARGS` as a real process, its output appended to ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [SPECTRAL, *args],
            cwd=ROOT,
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


async def wait_exit(process: subprocess.Popen[bytes], timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while process.poll() is None:
        if time.monotonic() > deadline:
            raise AssertionError(
                f"pid {process.pid} ({process.args!r}) still runs after {timeout}s"
            )
        await asyncio.sleep(0.05)
    return process.returncode


async def terminate(process: subprocess.Popen[bytes], timeout: float = 60.0) -> int:
    """SIGTERM and the exit code (a graceful stop is part of what is tested)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    return await wait_exit(process, timeout)


def kill_all(processes: Sequence[subprocess.Popen[bytes]]) -> None:
    """Leave nothing behind when a test fails half way."""
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def tail(log: Path, lines: int = 40) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
