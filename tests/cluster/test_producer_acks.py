"""Every producer spectral owns is acknowledged only with enough copies (acks=all, idempotent).

On the private 3-broker cluster, the event topic and its dead-letter topic live on brokers 2 and
3 with ``min.insync.replicas=2``; broker 3 is killed, so broker 2 alone holds them. A producer
with ``acks=1`` is then acknowledged with that single copy (the control: the cluster accepts
such a write). spectral's three producers — the outbox relay, the consumer's dead letters and
``dlq redrive``, each a real ``spectral`` process — must instead be refused by the broker
(NOT_ENOUGH_REPLICAS, visible in their logs) and keep retrying: no outbox row is marked
published, no offset is committed past the record whose dead letter is pending, no redrive is
recorded, and nothing reaches the topics. Once broker 3 is back, each completes, and each
record lands exactly once (the idempotent producer's retries never write twice).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from contracts import FAILURE_CLUSTER_DETECTED
from spectral.devstack.kafka_cluster import LocalKafkaCluster
from spectral.kafka.dlq import DeadLetter
from spectral.kafka.topics import dlq_topic, topic_for
from spectral.settings import Settings
from tests.cluster.support import (
    create_placed_topic,
    kill_all,
    start_spectral,
    tail,
    terminate,
    wait_exit,
    wait_isr,
)
from tests.integration.outbox.relay.support import enqueue_numbered, key_id, outbox_counts
from tests.kafka_support import end_offsets, read_all

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.cluster]

REFUSED = "NotEnoughReplicas"
HOLD_SECONDS = 6.0
ROWS = 30


async def _produce(
    bootstrap: str,
    topic: str,
    value: bytes,
    *,
    acks: int | str,
    headers: list[tuple[str, bytes | None]],
) -> int:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks=acks, enable_idempotence=acks == "all"
    )
    await producer.start()
    try:
        meta = await asyncio.wait_for(
            producer.send_and_wait(topic, value=value, key=value, headers=headers), 30
        )
    finally:
        await producer.stop()
    return int(meta.offset)


async def _committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        return await consumer.committed(TopicPartition(topic, 0)) or 0
    finally:
        await consumer.stop()


async def _redrives(database_url: str) -> int:
    conn = await asyncpg.connect(database_url)
    try:
        count: int = await conn.fetchval("SELECT count(*) FROM core.dlq_redrives")
    finally:
        await conn.close()
    return count


async def _until(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, f"{what} not within {timeout}s"
        await asyncio.sleep(0.2)


async def test_relay_dead_letters_and_redrive_wait_for_two_copies_and_land_once(
    cluster: LocalKafkaCluster,
    settings: Settings,
    database_url: str,
    spectral_env: dict[str, str],
    tmp_path: Path,
) -> None:
    bootstrap = settings.kafka_bootstrap
    assert bootstrap is not None
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    dlq = dlq_topic(topic)
    control = f"{settings.topic_prefix}control"
    for name in (topic, dlq, control):
        await create_placed_topic(bootstrap, name, [2, 3], {"min.insync.replicas": "2"})

    # Before the fault: a dead letter waiting to be redriven, a poison record for the consumer.
    seeded = DeadLetter(
        reason="not_json",
        detail="seeded by the test",
        source_topic=topic,
        source_partition=0,
        source_offset=0,
        consumer="rule-candidates",
        key=b"redriven",
        value=b"poison, redriven",
    )
    await _produce(bootstrap, dlq, seeded.value, acks="all", headers=seeded.headers())
    poison = await _produce(bootstrap, topic, b"poison, dead-lettered", acks="all", headers=[])
    await enqueue_numbered(database_url, [(key_id(k), 1) for k in range(ROWS)])

    cluster.broker(3).kill()
    for name in (topic, dlq, control):
        await wait_isr(bootstrap, name, [2], timeout=60)
    # The control: the same placement takes a write with one copy when the producer allows it.
    await _produce(bootstrap, control, b"one copy", acks=1, headers=[])
    ends_before = (await end_offsets(bootstrap, topic), await end_offsets(bootstrap, dlq))

    logs = {name: tmp_path / f"{name}.log" for name in ("relay", "consumer", "redrive")}
    processes = {
        "relay": start_spectral(
            spectral_env, logs["relay"], "outbox", "relay", "--poll-interval", "0.05"
        ),
        "consumer": start_spectral(spectral_env, logs["consumer"], "consume", "rule-candidates"),
        "redrive": start_spectral(
            spectral_env, logs["redrive"], "dlq", "redrive", "--topic", topic
        ),
    }
    try:
        # Until every producer was refused, and HOLD_SECONDS after: nothing acknowledged.
        deadline, held_until = time.monotonic() + 90, None
        while held_until is None or time.monotonic() < held_until:
            assert await outbox_counts(database_url) == (ROWS, ROWS), "relayed with one copy"
            assert (
                await _committed(bootstrap, settings.topic_prefix + "rule-candidates", topic)
                <= poison
            ), "offset committed past a dead letter written with one copy"
            assert await _redrives(database_url) == 0, "redrive recorded with one copy"
            assert processes["redrive"].poll() is None, tail(logs["redrive"])
            assert (
                await end_offsets(bootstrap, topic),
                await end_offsets(bootstrap, dlq),
            ) == ends_before, "a record reached the topics with one copy"
            if held_until is None and all(
                REFUSED in log.read_text(errors="replace") for log in logs.values()
            ):
                held_until = time.monotonic() + HOLD_SECONDS
            assert time.monotonic() < deadline, "not every producer tried within 90 s"
            await asyncio.sleep(0.5)

        await asyncio.to_thread(cluster.broker(3).start)
        assert await wait_exit(processes["redrive"], 90) == 0, tail(logs["redrive"])

        async def relayed() -> bool:
            return (await outbox_counts(database_url))[1] == 0

        await _until(relayed, 90, "the outbox relayed")

        async def consumed() -> bool:
            ends = await end_offsets(bootstrap, topic)
            return (
                await _committed(bootstrap, settings.topic_prefix + "rule-candidates", topic)
                == ends[0]
            )

        await _until(consumed, 90, "the consumer caught up")
        for name in ("relay", "consumer"):
            assert await terminate(processes[name]) == 0, tail(logs[name])
    finally:
        kill_all(list(processes.values()))

    events = [r for r in await read_all(bootstrap, topic) if r.header("event_type")]
    relayed_keys = Counter(r.header("idempotency_key") for r in events)
    assert len(relayed_keys) == ROWS
    assert set(relayed_keys.values()) == {1}, "an idempotent retry wrote a record twice"
    redriven = [r for r in await read_all(bootstrap, topic) if r.header("dlq.redriven_from")]
    assert [r.value for r in redriven] == [seeded.value]
    assert await _redrives(database_url) == 1
    letters = [r for r in await read_all(bootstrap, dlq) if r.header("dlq.source.offset")]
    of_poison = [r for r in letters if r.value == b"poison, dead-lettered"]
    assert len(of_poison) == 1, [r.headers for r in letters]
    assert len(await read_all(bootstrap, control)) == 1
