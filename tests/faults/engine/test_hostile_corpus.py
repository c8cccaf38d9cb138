"""Acceptance: a hostile corpus — headers, keys, sizes, codecs — through `spectral consume`,
`spectral replay`, `spectral rebuild` and `spectral dlq redrive`, as processes. Every process
exits cleanly, and every record ends applied, deduplicated, stale or dead-lettered (on T.dlq,
as a reference when the dead-letter topic is smaller than its source, or in core.dead_letters).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer

from contracts import FAILURE_CLUSTER_DETECTED
from spectral.kafka.topics import dlq_topic, topic_for
from spectral.settings import Settings
from tests.events import encode
from tests.integration.engine.hostile import (
    MIB,
    Hostile,
    corpus,
    dead_letters_of,
    publish_hostile,
)
from tests.integration.replay.support import spectral_cli, spectral_json
from tests.kafka_support import cluster_event, create_topics

pytestmark = [pytest.mark.integration, pytest.mark.faults]

CONSUMER = "rule-candidates"


async def _compressed(bootstrap: str, topic: str) -> list[Hostile]:
    """Valid snapshots in snappy, lz4 and zstd batches (and their Hostile descriptions)."""
    out: list[Hostile] = []
    for codec in ("snappy", "lz4", "zstd"):
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=codec, acks="all")
        await producer.start()
        try:
            for _ in range(3):
                event = cluster_event()
                key = str(event.payload.cluster_id).encode()
                await producer.send_and_wait(topic, encode(event), key=key, partition=0)
                out.append(Hostile(key, encode(event), (), valid=True, label=codec))
        finally:
            await producer.stop()
    return out


async def _handled(database_url: str) -> set[str]:
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT idempotency_key FROM core.event_handled_keys WHERE consumer = $1", CONSUMER
        )
    finally:
        await conn.close()
    return {r["idempotency_key"] for r in rows}


def _key_of(record: Hostile) -> str:
    return str(json.loads(record.value)["idempotency_key"])


async def _all_accounted(
    kafka_bootstrap: str,
    database_url: str,
    topic: str,
    records: Sequence[Hostile],
    offsets: Sequence[int],
) -> None:
    handled = await _handled(database_url)
    dead = await dead_letters_of(kafka_bootstrap, database_url, topic)
    for record, offset in zip(records, offsets, strict=True):
        dead_lettered = offset in dead.dead_on_topic or offset in dead.dead_in_table
        done = record.valid and _key_of(record) in handled
        assert done or dead_lettered, f"{record.label} at offset {offset} is unaccounted for"
        if not record.valid:
            assert dead_lettered, f"{record.label} at offset {offset} was not dead-lettered"


def _ok(env: dict[str, str], *args: str) -> str:
    result = spectral_cli(env, *args)
    assert result.returncode == 0, f"spectral {' '.join(args)}: {result.stderr[-3000:]}"
    return result.stdout


async def test_a_hostile_corpus_through_consume_replay_rebuild_and_redrive(
    settings: Settings, kafka_bootstrap: str, database_url: str, spectral_env: dict[str, str]
) -> None:
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await create_topics(kafka_bootstrap, [topic], configs={"max.message.bytes": str(10 * MIB)})
    await create_topics(kafka_bootstrap, [dlq_topic(topic)])  # the broker's default: 1 MiB
    records = corpus(seed=11)
    offsets = await publish_hostile(kafka_bootstrap, topic, records)
    compressed = await _compressed(kafka_bootstrap, topic)
    records += compressed
    offsets += list(range(offsets[-1] + 1, offsets[-1] + 1 + len(compressed)))
    poison = sum(1 for r in records if not r.valid)

    # consume: every record ends applied, deduplicated, stale or dead-lettered.
    await asyncio.to_thread(_ok, spectral_env, "consume", CONSUMER, "--stop-when-idle", "4")
    await _all_accounted(kafka_bootstrap, database_url, topic, records, offsets)

    # replay (applying): the same path; what was applied is deduplicated, poison dead-lettered
    # again.
    replayed = await asyncio.to_thread(
        spectral_json, spectral_env, "replay", CONSUMER, "--from-beginning", "--json"
    )
    assert replayed["complete"] is True
    assert replayed["applied"] == 0
    assert replayed["dead_lettered"] >= poison
    assert replayed["records"] == len(records)

    # rebuild: one transaction over the whole topic, committed.
    rebuilt = await asyncio.to_thread(
        spectral_json, spectral_env, "rebuild", "rule-candidates", "--json"
    )
    assert rebuilt["committed"] is True
    assert rebuilt["records"] == len(records)

    # dlq: listed and shown whatever they hold, then redriven.
    listed = await asyncio.to_thread(
        spectral_json, spectral_env, "dlq", "list", "--topic", topic, "--json"
    )
    assert len(listed) >= 2 * poison
    await asyncio.to_thread(_ok, spectral_env, "dlq", "list", "--topic", topic)
    redriven = await asyncio.to_thread(
        spectral_json, spectral_env, "dlq", "redrive", "--topic", topic, "--json"
    )
    assert redriven["refused"] == []
    assert redriven["redriven"] + redriven["skipped"].get("value_not_carried", 0) == len(listed)

    # The redriven records consumed: dead-lettered again or deduplicated; nothing stops.
    await asyncio.to_thread(_ok, spectral_env, "consume", CONSUMER, "--stop-when-idle", "4")
    await _all_accounted(kafka_bootstrap, database_url, topic, records, offsets)
    again = await asyncio.to_thread(
        spectral_json, spectral_env, "dlq", "list", "--topic", topic, "--json"
    )
    assert len(again) == len(listed) + redriven["redriven"]
