"""The ceiling and the baseline the consumer engine is measured against, on the same topic.

* raw drain: aiokafka ``getmany`` with the engine's fetch settings + ``json.loads`` of every
  value; no database, no validation, no commits — what the client library alone can do. The
  same with confluent-kafka (librdkafka) prices the transport.
* durable ceiling: the raw drain plus, per fetched batch (at most the engine's 2,000 records),
  one transaction that COPYs the records (partition, offset, key, value) into a plain table,
  then the offset commit — the engine's commit cadence with the least durable work per event.
* naive consumer: what a typical framework handler does — per event: decode with the contract,
  one transaction (the engine's own dedup INSERT and the projection's own upsert statement, each
  over one-element arrays), then one offset commit. Same SQL, same database role, same
  exactly-once guarantee; only the batching is missing.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import asyncpg
from aiokafka import AIOKafkaConsumer, TopicPartition

from benchmarks.statements import ENGINE_SQL, PROJECTION_SQL
from consumers.rule_candidates.collapse import ordered_at
from consumers.rule_candidates.handler import CONSUMER_NAME, DATABASE_ROLE
from contracts import DecodeError
from contracts.fields import epoch_micros
from spectral.engine.keys import dedup_key
from spectral.kafka.aiokafka_source import FETCH_MAX_BYTES, PARTITION_FETCH_BYTES
from spectral.plugins import installed_registry

BATCH = 2000
"""Records per fetch, as the engine's ``max_batch``."""
_FETCH = {  # the engine's own fetch settings
    "fetch_max_bytes": FETCH_MAX_BYTES,
    "max_partition_fetch_bytes": PARTITION_FETCH_BYTES,
    "isolation_level": "read_committed",
}


@dataclass(frozen=True)
class Throughput:
    events: int
    seconds: float
    cpu_seconds: float = 0.0
    """This process's CPU (every thread) in the window."""

    @property
    def cpu_us_per_event(self) -> float:
        return self.cpu_seconds / self.events * 1e6 if self.events else 0.0

    @property
    def per_second(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


async def raw_drain(
    bootstrap: str, topic: str, ends: dict[int, int], *, limit_seconds: float
) -> Throughput:
    """Read ``topic`` to ``ends`` parsing every value; timed from the first non-empty fetch."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, max_poll_records=BATCH, **_FETCH
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in sorted(ends)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        target = sum(ends.values())
        count = 0
        window = _Window()
        deadline = time.monotonic() + limit_seconds
        while count < target and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500, max_records=BATCH)
            if not batches:
                continue
            window.start()
            for records in batches.values():
                for record in records:
                    json.loads(record.value)
                count += len(records)
        return window.end(count)
    finally:
        await consumer.stop()


def confluent_drain(
    bootstrap: str, topic: str, ends: dict[int, int], *, limit_seconds: float
) -> Throughput:
    """The raw drain with confluent-kafka (librdkafka): ``consume`` batches of up to 2,000 with
    the engine's fetch sizes, ``json.loads`` of every value. Blocking: run it in a thread."""
    from confluent_kafka import (  # noqa: PLC0415 - a benchmark-only dependency
        OFFSET_BEGINNING,
        Consumer,
    )
    from confluent_kafka import TopicPartition as ConfluentPartition  # noqa: PLC0415

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-drain-unused",
            "enable.auto.commit": False,
            "fetch.max.bytes": FETCH_MAX_BYTES,
            "max.partition.fetch.bytes": PARTITION_FETCH_BYTES,
            "isolation.level": "read_committed",
        }
    )
    try:
        consumer.assign([ConfluentPartition(topic, p, OFFSET_BEGINNING) for p in sorted(ends)])
        target = sum(ends.values())
        count = 0
        window = _Window()
        deadline = time.monotonic() + limit_seconds
        while count < target and time.monotonic() < deadline:
            messages = consumer.consume(num_messages=BATCH, timeout=0.5)
            if not messages:
                continue
            window.start()
            for message in messages:
                value = message.value()
                if message.error() is None and value is not None:
                    json.loads(value)
                    count += 1
        return window.end(count)
    finally:
        consumer.close()


CEILING_TABLE = "bench_durable_ceiling"


async def durable_ceiling(
    bootstrap: str,
    topic: str,
    ends: dict[int, int],
    database_url: str,
    *,
    group: str,
    limit_seconds: float,
) -> Throughput:
    """The raw drain + per batch one transaction COPYing its records into a plain table, then
    the offset commit (what the engine's cadence costs with the least durable work)."""
    conn = await asyncpg.connect(database_url)
    await conn.execute(
        f"CREATE TABLE IF NOT EXISTS {CEILING_TABLE} (source_partition integer NOT NULL, "
        "source_offset bigint NOT NULL, record_key bytea, record_value bytea NOT NULL)"
    )
    await conn.execute(f"TRUNCATE {CEILING_TABLE}")
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=BATCH,
        **_FETCH,
    )
    await consumer.start()
    try:
        target = sum(ends.values())
        count = 0
        window = _Window()
        deadline = time.monotonic() + limit_seconds
        while count < target and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500, max_records=BATCH)
            if not batches:
                continue
            window.start()
            rows = []
            offsets = {}
            for tp, records in batches.items():
                for record in records:
                    json.loads(record.value)
                    rows.append((record.partition, record.offset, record.key, record.value))
                offsets[tp] = records[-1].offset + 1
            async with conn.transaction():
                await conn.copy_records_to_table(
                    CEILING_TABLE,
                    records=rows,
                    columns=("source_partition", "source_offset", "record_key", "record_value"),
                )
            await consumer.commit(offsets)
            count += len(rows)
        return window.end(count)
    finally:
        await consumer.stop()
        await conn.close()


class _Window:
    """From the first non-empty fetch: wall time and this process's CPU."""

    def __init__(self) -> None:
        self.started: float | None = None
        self.cpu = 0.0

    def start(self) -> None:
        if self.started is None:
            self.started = time.perf_counter()
            self.cpu = time.process_time()

    def end(self, count: int) -> Throughput:
        assert self.started is not None, "no record was fetched"
        return Throughput(count, time.perf_counter() - self.started, time.process_time() - self.cpu)


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
                    await _naive_one(conn, record)
                    await consumer.commit({tp: record.offset + 1})
                    count += 1
        assert started is not None
        return Throughput(count, time.perf_counter() - started)
    finally:
        await consumer.stop()
        await conn.close()


async def _naive_one(conn: asyncpg.Connection, record: object) -> None:
    value: bytes = getattr(record, "value", b"")
    try:
        envelope = installed_registry().decode(value)
    except DecodeError:
        return  # the stream holds no poison records; a real handler would dead-letter here
    p = envelope.payload
    async with conn.transaction():
        held = await conn.fetchval(
            ENGINE_SQL["claim_keys"],
            CONSUMER_NAME,
            [dedup_key(envelope.idempotency_key)],
            [envelope.event_id],
            [getattr(record, "partition", 0)],
            [getattr(record, "offset", 0)],
        )
        if held:
            return  # a duplicate
        written = await conn.fetch(
            PROJECTION_SQL["upsert_snapshots"],
            [
                (
                    p.cluster_id,
                    p.snapshot_hash,
                    p.rule_id,
                    p.workspace_id,
                    p.severity,
                    p.failure_count,
                    epoch_micros(p.first_observed_at),
                    epoch_micros(p.last_observed_at),
                    p.suggested_rule_stub,
                    value,
                    ordered_at(
                        epoch_micros(p.last_observed_at),
                        getattr(record, "timestamp", 0) or 0,
                        time.time_ns() // 1000,
                    ),
                    False,  # the prior snapshot is not read here
                )
            ],
        )
        if not written:
            await conn.execute(
                ENGINE_SQL["mark_stale"], CONSUMER_NAME, [dedup_key(envelope.idempotency_key)]
            )
