"""The rule-candidates deployment through the real broker: engine + handler + database.

The engine runs the handler acting as spectral_projector (handler.database_role), so these
tests also prove the role has exactly the privileges the engine's batch needs.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from prometheus_client import CollectorRegistry

from consumers.rule_candidates.deployment import build
from contracts import FAILURE_CLUSTER_DETECTED, EventEnvelope, snapshot_hash
from spectral.engine.engine import ConsumerEngine, EngineOptions, RunSummary
from spectral.engine.handler import Outcome
from spectral.kafka.topics import dlq_topic, topic_for
from spectral.settings import Settings
from tests.events import encode
from tests.integration.rule_candidates.helpers import snapshot

pytestmark = pytest.mark.integration

CONSUMER = "rule-candidates"


async def _create_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1) for name in names]
        )
    finally:
        await admin.close()


async def _publish(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> list[int]:
    """Publish (key, value) pairs in order; returns their offsets."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        return [
            (await producer.send_and_wait(topic, value=value, key=key)).offset
            for key, value in records
        ]
    finally:
        await producer.stop()


async def _publish_envelopes(
    bootstrap: str, topic: str, envelopes: list[EventEnvelope[Any]]
) -> list[int]:
    return await _publish(bootstrap, topic, [(_key(e), encode(e)) for e in envelopes])


async def _run(settings: Settings, group: str | None = None) -> RunSummary:
    assert settings.kafka_bootstrap is not None
    assert settings.database_url is not None
    url = settings.database_url.get_secret_value()
    handler = build(settings, url, CollectorRegistry())
    engine = ConsumerEngine(
        handler,
        settings,
        kafka_bootstrap=settings.kafka_bootstrap,
        database_url=url,
        options=EngineOptions(group=group, stop_when_idle=2.0, max_batch=500),
        registry=CollectorRegistry(),
    )
    return await engine.run()


async def _fetch(database_url: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(database_url)
    try:
        return list(await conn.fetch(sql, *args))
    finally:
        await conn.close()


async def _fully_committed(bootstrap: str, group: str, topic: str, partitions: int) -> bool:
    """Whether ``group`` committed every partition of ``topic`` up to its end."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = await consumer.end_offsets(tps)
        committed = {tp: await consumer.committed(tp) for tp in tps}
    finally:
        await consumer.stop()
    return all((committed[tp] or 0) == ends[tp] for tp in tps) and sum(ends.values()) > 0


async def _read(bootstrap: str, topic: str, partitions: int = 1) -> list[Any]:
    """Every record of ``topic`` up to its current end."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        records: list[Any] = []
        for _ in range(100):
            behind = [tp for tp in tps if await consumer.position(tp) < ends[tp]]
            if not behind:
                return records
            for batch in (await consumer.getmany(timeout_ms=200)).values():
                records.extend(batch)
        raise AssertionError(f"could not read {topic} to its end")
    finally:
        await consumer.stop()


def _header(record: Any, name: str) -> str:
    value: bytes = next(v for k, v in record.headers if k == name)
    return value.decode()


def _rehash(wire: dict[str, Any]) -> bytes:
    """The envelope with its hash and key recomputed, so only the intended flaw remains."""
    payload = wire["payload"]
    payload["snapshot_hash"] = snapshot_hash(payload)
    wire["idempotency_key"] = f"{payload['cluster_id']}:{payload['snapshot_hash']}"
    return json.dumps(wire).encode()


def _key(envelope: EventEnvelope[Any]) -> bytes:
    return str(envelope.payload.cluster_id).encode()


async def test_duplicates_apply_once_and_older_snapshots_are_stale(
    settings: Settings, kafka_bootstrap: str, database_url: str
) -> None:
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await _create_topics(kafka_bootstrap, [topic], partitions=2)
    cluster = uuid.uuid4()
    first = snapshot(cluster, minutes=1, failures=3)
    republished = first.model_copy(update={"event_id": uuid.uuid4()})  # same key, new event_id
    second = snapshot(cluster, minutes=2, failures=5)
    others = [snapshot(uuid.uuid4(), minutes=i, failures=2) for i in range(5)]
    await _publish_envelopes(
        kafka_bootstrap, topic, [first, republished, *others, second, first]
    )  # the last one: the identical snapshot re-emitted (same bytes, new offset)

    summary = await _run(settings)

    assert summary.counts[Outcome.APPLIED] == 7
    assert summary.counts[Outcome.DEDUPLICATED] == 2
    assert summary.counts[Outcome.DEAD_LETTERED] == 0
    rows = await _fetch(
        database_url,
        "SELECT snapshot_hash, failure_count, status FROM platform.rule_candidates_pending"
        " WHERE cluster_id = $1",
        cluster,
    )
    assert [tuple(r) for r in rows] == [(second.payload.snapshot_hash, 5, "pending")]
    handled = await _fetch(
        database_url,
        "SELECT idempotency_key, outcome FROM core.event_handled_keys WHERE consumer = $1",
        CONSUMER,
    )
    assert len(handled) == 7
    assert await _fully_committed(
        kafka_bootstrap, settings.topic_prefix + CONSUMER, topic, partitions=2
    )

    # Later: an older snapshot arrives (stale, recorded as such), and a fresh consumer group
    # replays the topic from the start (everything deduplicated, nothing applied twice).
    older = snapshot(cluster, minutes=0, failures=9)
    await _publish_envelopes(kafka_bootstrap, topic, [older])
    summary = await _run(settings)
    assert summary.counts[Outcome.STALE] == 1
    outcome = await _fetch(
        database_url,
        "SELECT outcome FROM core.event_handled_keys WHERE consumer = $1 AND idempotency_key = $2",
        CONSUMER,
        older.idempotency_key,
    )
    assert [r["outcome"] for r in outcome] == ["stale"]

    replay = await _run(settings, group="rule-candidates-replay")
    assert replay.counts[Outcome.DEDUPLICATED] == 10
    assert replay.counts[Outcome.APPLIED] == 0
    rows = await _fetch(
        database_url,
        "SELECT snapshot_hash FROM platform.rule_candidates_pending WHERE cluster_id = $1",
        cluster,
    )
    assert [r["snapshot_hash"] for r in rows] == [second.payload.snapshot_hash]


async def test_poison_records_are_dead_lettered_and_later_records_still_apply(
    settings: Settings, kafka_bootstrap: str, database_url: str
) -> None:
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await _create_topics(kafka_bootstrap, [topic, dlq_topic(topic)], partitions=1)
    before, after = snapshot(uuid.uuid4()), snapshot(uuid.uuid4())

    tampered = json.loads(encode(snapshot(uuid.uuid4())))
    tampered["payload"]["failure_count"] = 99  # content changed, hash not recomputed
    unknown = json.loads(encode(snapshot(uuid.uuid4())))
    unknown["event_type"] = "platform.failure_cluster.vanished"
    over_bound = json.loads(encode(snapshot(uuid.uuid4(), failures=11)))
    bundle = over_bound["payload"]["evidence_bundle"]
    bundle.extend(dict(bundle[0], failure_id=f"f-extra-{i}") for i in range(8))  # 11 > 10
    nul = json.loads(encode(snapshot(uuid.uuid4())))
    nul["payload"]["evidence_bundle"][0]["summary"] = "stack\u0000trace"  # the contract refuses

    poison: list[tuple[str, bytes]] = [
        ("not_json", b'{"event_id": "truncated'),
        ("unknown_event_type", json.dumps(unknown).encode()),
        ("hash_mismatch", json.dumps(tampered).encode()),
        ("invalid_payload", _rehash(over_bound)),
        ("invalid_payload", _rehash(nul)),
        ("record_key_mismatch", encode(snapshot(uuid.uuid4()))),  # valid, but keyed b"poison"
    ]
    records = [
        (_key(before), encode(before)),
        *((b"poison", value) for _, value in poison),
        (_key(after), encode(after)),
    ]
    offsets = await _publish(kafka_bootstrap, topic, records)

    summary = await _run(settings)

    assert summary.counts[Outcome.APPLIED] == 2
    assert summary.counts[Outcome.DEAD_LETTERED] == len(poison)
    applied = await _fetch(database_url, "SELECT cluster_id FROM platform.rule_candidates_pending")
    assert {r["cluster_id"] for r in applied} == {
        before.payload.cluster_id,
        after.payload.cluster_id,
    }
    dead = await _read(kafka_bootstrap, dlq_topic(topic))
    assert [_header(d, "dlq.reason") for d in dead] == [reason for reason, _ in poison]
    assert [d.value for d in dead] == [value for _, value in poison]
    assert [int(_header(d, "dlq.source.offset")) for d in dead] == offsets[1:-1]
    assert {_header(d, "dlq.consumer") for d in dead} == {CONSUMER}
    assert "U+0000" in _header(dead[-2], "dlq.detail")
    assert await _fully_committed(
        kafka_bootstrap, settings.topic_prefix + CONSUMER, topic, partitions=1
    )
    handled = await _fetch(
        database_url, "SELECT count(*) AS n FROM core.event_handled WHERE consumer = $1", CONSUMER
    )
    assert handled[0]["n"] == 2  # no dead letter left a dedup row behind (a redrive applies)
