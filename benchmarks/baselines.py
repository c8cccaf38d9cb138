"""The ceiling and the baseline the consumer engine is measured against, on the same topic.

* raw drain: aiokafka ``getmany`` with the engine's fetch settings + ``json.loads`` of every
  value; no database, no validation, no commits — what the client library alone can do.
* naive consumer: what a typical framework handler does — per event: decode with the contract,
  one transaction (the engine's own dedup INSERT and the projection's own upsert statement, each
  over one-element arrays), then one offset commit. Same SQL, same database role, same
  exactly-once guarantee; only the batching is missing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
from aiokafka import AIOKafkaConsumer, TopicPartition

from consumers.rule_candidates.collapse import ordered_at
from consumers.rule_candidates.handler import CONSUMER_NAME, DATABASE_ROLE
from consumers.rule_candidates.repository import QUERIES as PROJECTION_QUERIES
from contracts import DecodeError, decode
from spectral.consumer.engine import FETCH_MAX_BYTES, PARTITION_FETCH_BYTES
from spectral.db.queries import load_queries

_ENGINE_QUERIES = Path(__file__).resolve().parents[1] / "spectral" / "consumer" / "queries.sql"
_FETCH = {  # the engine's own fetch settings
    "fetch_max_bytes": FETCH_MAX_BYTES,
    "max_partition_fetch_bytes": PARTITION_FETCH_BYTES,
    "isolation_level": "read_committed",
}


@dataclass(frozen=True)
class Throughput:
    events: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


async def raw_drain(
    bootstrap: str, topic: str, ends: dict[int, int], *, limit_seconds: float
) -> Throughput:
    """Read ``topic`` to ``ends`` parsing every value; timed from the first non-empty fetch."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, max_poll_records=2000, **_FETCH
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in sorted(ends)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        target = sum(ends.values())
        count = 0
        started: float | None = None
        deadline = time.monotonic() + limit_seconds
        while count < target and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500, max_records=2000)
            if not batches:
                continue
            if started is None:
                started = time.perf_counter()
            for records in batches.values():
                for record in records:
                    json.loads(record.value)
                count += len(records)
        assert started is not None
        return Throughput(count, time.perf_counter() - started)
    finally:
        await consumer.stop()


async def naive(
    bootstrap: str,
    topic: str,
    database_url: str,
    *,
    group: str,
    limit: int,
    limit_seconds: float,
) -> Throughput:
    """Consume the first ``limit`` records one transaction and one commit at a time."""
    engine_sql = load_queries(_ENGINE_QUERIES)
    projection_sql = load_queries(PROJECTION_QUERIES)
    conn = await asyncpg.connect(database_url, server_settings={"role": DATABASE_ROLE})
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=500,
        **_FETCH,
    )
    await consumer.start()
    try:
        count = 0
        started: float | None = None
        deadline = time.monotonic() + limit_seconds
        while count < limit and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500, max_records=500)
            if batches and started is None:
                started = time.perf_counter()
            for tp, records in batches.items():
                for record in records:
                    if count >= limit:
                        break
                    await _naive_one(conn, engine_sql, projection_sql, record)
                    await consumer.commit({tp: record.offset + 1})
                    count += 1
        assert started is not None
        return Throughput(count, time.perf_counter() - started)
    finally:
        await consumer.stop()
        await conn.close()


async def _naive_one(
    conn: asyncpg.Connection,
    engine_sql: Mapping[str, str],
    projection_sql: Mapping[str, str],
    record: object,
) -> None:
    value: bytes = getattr(record, "value", b"")
    try:
        envelope = decode(value)
    except DecodeError:
        return  # the stream holds no poison records; a real handler would dead-letter here
    p = envelope.payload
    async with conn.transaction():
        fresh = await conn.fetch(
            engine_sql["claim_keys"],
            CONSUMER_NAME,
            [envelope.idempotency_key],
            [envelope.event_id],
            [getattr(record, "partition", 0)],
            [getattr(record, "offset", 0)],
        )
        if not fresh:
            return
        written = await conn.fetch(
            projection_sql["upsert_snapshots"],
            [p.cluster_id],
            [p.snapshot_hash],
            [p.rule_id],
            [p.workspace_id],
            [p.severity],
            [p.failure_count],
            [p.first_observed_at],
            [p.last_observed_at],
            [value],
            [p.suggested_rule_stub],
            [
                ordered_at(
                    p.last_observed_at, getattr(record, "timestamp", 0) or 0, datetime.now(UTC)
                )
            ],
        )
        if not written:
            await conn.execute(engine_sql["mark_stale"], CONSUMER_NAME, [envelope.idempotency_key])
