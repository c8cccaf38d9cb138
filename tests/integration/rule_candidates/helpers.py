"""Building real failure-cluster deliveries and role-bound connections for these tests."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any
from uuid import UUID

import asyncpg
from prometheus_client import CollectorRegistry

from consumers.rule_candidates.deployment import build
from consumers.rule_candidates.handler import Counts, RuleCandidatesHandler
from contracts import EventEnvelope, FailureRef, Severity, failure_cluster_detected_event
from spectral.engine.decode import RecordDecoder
from spectral.engine.handler import Delivery, HandlerResult
from spectral.settings import load_settings
from tests.events import EVENTS, decode, encode

T0 = datetime(2026, 3, 1, 12, 0, 0, 250_000, tzinfo=UTC)
TOPIC = "platform.failure_cluster.detected"


def snapshot(
    cluster_id: UUID,
    *,
    minutes: int = 0,
    failures: int = 3,
    severity: Severity = "medium",
    rule_id: UUID | None = None,
    workspace_id: UUID | None = None,
    summary: str = "rule R7 failed on scan",
    stub: str | None = None,
) -> EventEnvelope[Any]:
    """A snapshot of ``cluster_id`` last observed ``minutes`` after T0."""
    last = T0 + timedelta(minutes=minutes)
    return failure_cluster_detected_event(
        cluster_id=cluster_id,
        rule_id=rule_id or UUID(int=1),
        workspace_id=workspace_id or UUID(int=2),
        severity=severity,
        failure_count=failures,
        first_observed_at=T0 - timedelta(hours=1),
        last_observed_at=last,
        evidence_bundle=[
            FailureRef(
                failure_id=f"f-{i}", observed_at=last - timedelta(minutes=i), summary=summary
            )
            for i in range(3)
        ],
        suggested_rule_stub=stub,
    )


def delivery(envelope: EventEnvelope[Any], offset: int = 0, partition: int = 0) -> Delivery:
    """The delivery the engine would hand over: the record bytes and their decoded envelope."""
    raw = encode(envelope)
    return delivery_of_bytes(raw, offset, partition)


def delivery_of_bytes(raw: bytes, offset: int = 0, partition: int = 0) -> Delivery:
    """The engine's own decode step over the record (the handler reads views)."""
    record = SimpleNamespace(
        topic=TOPIC,
        partition=partition,
        offset=offset,
        key=str(decode(raw).payload.cluster_id).encode(),
        value=raw,
        timestamp=0,
        headers=(),
    )
    decoded = _DECODER.decode(record)
    assert isinstance(decoded, Delivery), decoded
    return decoded


_DECODER = RecordDecoder("tests", {TOPIC: TOPIC}, EVENTS, views=True)


def deliveries(*envelopes: EventEnvelope[Any]) -> list[Delivery]:
    return [delivery(e, offset=i) for i, e in enumerate(envelopes)]


def new_handler(registry: CollectorRegistry | None = None) -> RuleCandidatesHandler:
    return build(load_settings(), "unused", registry or CollectorRegistry())


@asynccontextmanager
async def connected(database_url: str, role: str | None) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(database_url, server_settings={"role": role} if role else None)
    try:
        yield conn
    finally:
        await conn.close()


async def apply(
    database_url: str, handler: RuleCandidatesHandler, batch: Sequence[Delivery]
) -> HandlerResult[Counts]:
    """One batch in one transaction as spectral_projector, then after_commit, like the engine."""
    async with connected(database_url, "spectral_projector") as conn:
        async with conn.transaction():
            result = await handler.apply(conn, batch)
        await handler.after_commit(result)
    return result


async def row(database_url: str, cluster_id: UUID) -> asyncpg.Record:
    async with connected(database_url, None) as conn:
        record = await conn.fetchrow(
            "SELECT * FROM platform.rule_candidates_pending WHERE cluster_id = $1", cluster_id
        )
    assert record is not None
    return record


def new_cluster() -> UUID:
    return uuid.uuid4()


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else value
