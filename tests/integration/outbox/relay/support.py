"""Helpers for the outbox relay tests: numbered events per key, the outbox, the topic."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import asyncpg
from prometheus_client import CollectorRegistry

from contracts import EventEnvelope, failure_cluster_detected_event
from spectral.outbox.relay import OutboxRelay, RelayMetrics, RelayOptions
from spectral.outbox.writer import OutboxItem, enqueue
from spectral.settings import Settings
from tests.events import decode
from tests.kafka_support import ReadRecord, partitions_of, read_all

EVENT_TYPE = "platform.failure_cluster.detected"
T0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)


def key_id(n: int) -> UUID:
    return UUID(int=0xC1 << 96 | n)


def numbered(key: UUID, seq: int) -> EventEnvelope[Any]:
    """Snapshot number ``seq`` of cluster ``key`` (failure_count carries the number)."""
    return failure_cluster_detected_event(
        cluster_id=key,
        rule_id=UUID(int=1),
        workspace_id=UUID(int=2),
        severity="low",
        failure_count=seq,
        first_observed_at=T0,
        last_observed_at=T0 + timedelta(seconds=seq),
        evidence_bundle=[],
    )


async def enqueue_numbered(
    database_url: str, pairs: Sequence[tuple[UUID, int]], available_at: datetime | None = None
) -> list[int]:
    conn = await asyncpg.connect(database_url)
    try:
        async with conn.transaction():
            return await enqueue(
                conn, [OutboxItem(numbered(k, s), str(k), available_at) for k, s in pairs]
            )
    finally:
        await conn.close()


async def outbox_counts(database_url: str) -> tuple[int, int]:
    """(rows, unpublished rows)."""
    conn = await asyncpg.connect(database_url)
    try:
        row = await conn.fetchrow(
            "SELECT count(*) AS n, count(*) FILTER (WHERE published_at IS NULL) AS u "
            "FROM core.outbox"
        )
    finally:
        await conn.close()
    assert row is not None
    return int(row["n"]), int(row["u"])


@dataclass(frozen=True)
class Received:
    partition: int
    offset: int
    key: str
    seq: int
    idempotency_key: str
    headers: dict[str, str]
    timestamp_ms: int = 0
    """Its Kafka timestamp: when the relay sent it (ms since the epoch)."""


def _received(record: ReadRecord) -> Received:
    envelope = decode(record.value)
    return Received(
        record.partition,
        record.offset,
        (record.key or b"").decode(),
        envelope.payload.failure_count,
        envelope.idempotency_key,
        {k: (v or b"").decode() for k, v in record.headers},
        record.timestamp_ms,
    )


async def read_topic(bootstrap: str, topic: str, timeout: float = 20.0) -> list[Received]:
    """Every record of ``topic`` up to its end, partition by partition, decoded."""
    for _ in range(100):  # a topic the relay has just created takes a moment to be described
        if await partitions_of(bootstrap, topic):
            break
        await asyncio.sleep(0.1)
    records = await read_all(bootstrap, topic, timeout)
    return sorted(map(_received, records), key=lambda x: (x.partition, x.offset))


def by_key(records: Sequence[Received]) -> dict[str, list[int]]:
    """The sequence numbers of each key in the order Kafka holds them (one key = one
    partition, so partition order is the order a consumer sees)."""
    seqs: dict[str, list[int]] = defaultdict(list)
    for r in records:
        seqs[r.key].append(r.seq)
    return dict(seqs)


def assert_in_order_without_gaps(seqs: Sequence[int], expected_last: int) -> None:
    """At-least-once per-key order: when number n appears, 1..n-1 have all appeared before it
    (duplicates allowed, never a newer one before an older one's first appearance)."""
    seen_max = 0
    for n in seqs:
        assert n <= seen_max + 1, f"{n} arrived before {seen_max + 1}: {seqs}"
        seen_max = max(seen_max, n)
    assert seen_max == expected_last, f"expected up to {expected_last}, saw {seqs}"


def make_relay(
    settings: Settings, registry: CollectorRegistry | None = None, **options: object
) -> OutboxRelay:
    """A relay on the test stack, its metrics in ``registry`` (a fresh one by default)."""
    assert settings.kafka_bootstrap is not None
    assert settings.database_url is not None
    return OutboxRelay(
        settings,
        kafka_bootstrap=settings.kafka_bootstrap,
        database_url=settings.database_url.get_secret_value(),
        metrics=RelayMetrics(registry or CollectorRegistry()),
        options=RelayOptions(**options),  # type: ignore[arg-type]
    )
