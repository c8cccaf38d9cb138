"""Helpers for the FailureClusterService tests: observations, a counting synthesizer, the work
executor that pays for rule stubs, reads."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import asyncpg
from prometheus_client import CollectorRegistry

from consumers.work_executor.handler import WorkExecutorHandler
from contracts import EventEnvelope
from producers.clusters import ClusterMetrics, ClusterPolicy, FailureClusterService
from producers.clusters.model import FailureObservation
from spectral.db.connect import create_pool
from spectral.errors import TransientError
from spectral.llm.seam import SynthesisRequest, SynthesisResponse
from spectral.llm.stub import StubSynthesizer
from spectral.settings import Settings
from tests.events import decode
from tests.integration.work.support import executor, executor_settings

T0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)
WORKSPACE = UUID("5f0c7d1e-0000-4000-8000-000000000001")


def rule(n: int) -> UUID:
    return UUID(int=0xA11CE << 100 | n)


def failure(
    failure_id: str,
    *,
    rule_n: int = 1,
    signature: str = "sig",
    minutes: int = 0,
    summary: str | None = None,
    workspace: UUID = WORKSPACE,
) -> FailureObservation:
    return FailureObservation(
        failure_id=failure_id,
        rule_id=rule(rule_n),
        workspace_id=workspace,
        observed_at=T0 + timedelta(minutes=minutes),
        summary=summary if summary is not None else f"{signature} failed",
        signature=signature,
    )


class CountingSynthesizer:
    """The deterministic stub, counting calls per idempotency key (a test double of the model
    gateway, not of Kafka or PostgreSQL). ``delay`` widens race windows; ``fail`` makes every
    call a transient failure."""

    def __init__(self, delay: float = 0.0, *, fail: bool = False) -> None:
        self.calls: Counter[str] = Counter()
        self.delay = delay
        self.fail = fail
        self._inner = StubSynthesizer()

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    async def synthesize(self, request: SynthesisRequest) -> SynthesisResponse:
        self.calls[request.idempotency_key] += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail:
            raise TransientError("gateway timed out (test)")
        return await self._inner.synthesize(request)


@asynccontextmanager
async def service(
    database_url: str,
    *,
    policy: ClusterPolicy | None = None,
    registry: CollectorRegistry | None = None,
) -> AsyncIterator[FailureClusterService]:
    async with FailureClusterService.connect(
        database_url, policy=policy, metrics=ClusterMetrics(registry or CollectorRegistry())
    ) as svc:
        yield svc


@asynccontextmanager
async def stub_executor(
    database_url: str, settings: Settings, synthesizer: Any, **overrides: Any
) -> AsyncIterator[WorkExecutorHandler]:
    """The work executor that pays for the rule stubs (driven by explicit sweeps)."""
    async with executor(
        executor_settings(settings, **overrides), database_url, synthesizer
    ) as handler:
        yield handler


async def settle_stubs(handler: WorkExecutorHandler, database_url: str) -> None:
    """Run the executor until no stub work is live (retries made due at once)."""
    admin = await create_pool(database_url, max_size=2)
    try:
        for _ in range(40):
            await admin.execute(
                "UPDATE work.work_items SET not_before = now() WHERE status = 'failed'"
            )
            await handler.sweep_once()
            await handler.drain()
            live = await admin.fetchval(
                "SELECT count(*) FROM work.work_items WHERE function_key = 'rule_stub' "
                "AND status IN ('queued', 'claimed', 'running', 'failed')"
            )
            if live == 0:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"{live} rule-stub items still live")
    finally:
        await admin.close()


async def outbox_events(database_url: str) -> list[tuple[str, EventEnvelope[Any]]]:
    """Every snapshot in the outbox, in id order, as (record_key, decoded envelope) — decode
    verifies the snapshot hash and the idempotency key, as a consumer would. (The outbox also
    holds the work events of the stubs asked for.)"""
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT record_key, envelope FROM core.outbox "
            "WHERE event_type = 'platform.failure_cluster.detected' ORDER BY id"
        )
    finally:
        await conn.close()
    return [(r["record_key"], decode(bytes(r["envelope"]))) for r in rows]


async def fetch(database_url: str, query: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(database_url)
    try:
        return await conn.fetch(query, *args)
    finally:
        await conn.close()
