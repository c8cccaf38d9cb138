"""Rule-stub leases as the service before migration 0021 left them (``clusters.rule_stub_leases``),
for the tests that migrate such a database: what the old service asked the model for each
cluster, and a lease of that request in a given state."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlsplit
from uuid import UUID

import asyncpg

from producers.clusters import ClusterPolicy
from producers.clusters.evidence import select_evidence
from producers.clusters.repository import ClusterRepository
from producers.clusters.snapshot import build_snapshot, stub_request
from spectral.db.migrate import migrate
from spectral.llm.seam import SynthesisRequest
from tests.integration.clusters.support import fetch
from tests.support import unique_name, with_database

MIGRATION = "_one_paid_call_machine.sql"
"""The migration that moves the leases onto the work ledger (its number is the integrator's)."""


async def old_requests(url: str, policy: ClusterPolicy) -> dict[UUID, SynthesisRequest]:
    """What the old service asked the model for each cluster's current content, computed by
    today's code on a fully migrated copy of the old database (no later migration changes a
    cluster's facts), so the old schema needs no code of its own however the queries grow."""
    name = unique_name("spectral_stubreq_")
    admin = await asyncpg.connect(with_database(url, "postgres"))
    try:
        template = urlsplit(url).path.removeprefix("/")
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        try:
            copy = with_database(url, name)
            await migrate(copy)
            return await _asked(copy, policy)
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def _asked(url: str, policy: ClusterPolicy) -> dict[UUID, SynthesisRequest]:
    ids = [r["cluster_id"] for r in await fetch(url, "SELECT cluster_id FROM clusters.clusters")]
    async with ClusterRepository.open(url, role=None) as repo, repo.unit() as unit:
        facts = await unit.facts(ids, policy.default_criticality, policy.severity.rate_window)
        candidates = await unit.evidence(ids, policy.evidence_limit)
    asked: dict[UUID, SynthesisRequest] = {}
    for f in facts:
        evidence = select_evidence(candidates.get(f.cluster_id, ()), policy.evidence_limit)
        asked[f.cluster_id] = stub_request(f, build_snapshot(f, evidence, policy.severity))
    return asked


def content_hash(request: SynthesisRequest) -> str:
    """The content hash a request asks about (the last part of its idempotency key)."""
    return request.idempotency_key.rsplit(":", 1)[1]


@dataclass(frozen=True)
class OldLease:
    """One row of ``clusters.rule_stub_leases``. ``age`` is how long ago it was stamped (its
    claim, or its end); ``retry_in`` is when its retry is due (None: no retry scheduled)."""

    mode: str  # pending | llm | failed | superseded
    stub: str = ""
    attempts: int = 1
    model: str | None = None
    age: timedelta = timedelta(hours=1)
    retry_in: timedelta | None = None
    error: str | None = None


async def insert_lease(
    conn: asyncpg.Connection,
    cluster_id: UUID,
    request: SynthesisRequest,
    lease: OldLease,
    *,
    content: str | None = None,
) -> None:
    """The lease of ``request`` (of ``content``, the request's own content by default) as the
    old service left it, held by a replica named ``old-replica``."""
    await conn.execute(
        "INSERT INTO clusters.rule_stub_leases (cluster_id, content_hash, generation_mode, "
        "suggested_rule_stub, request, holder, attempts, generated_at, model, retry_at, "
        "last_error, response) VALUES ($1, $2, $3, $4, $5::jsonb, 'old-replica', $6, "
        "now() - $7::interval, $8, now() + $9::interval, $10, $11::jsonb)",
        cluster_id,
        content or content_hash(request),
        lease.mode,
        lease.stub,
        request_json(request),
        lease.attempts,
        lease.age,
        lease.model,
        lease.retry_in,
        lease.error,
        json.dumps({"content": json.dumps({"rule_stub": lease.stub})}) if lease.stub else None,
    )


def request_json(request: SynthesisRequest) -> str:
    """The old lease's ``request`` column."""
    return json.dumps(
        {
            "function_key": request.function_key,
            "prompt": request.prompt,
            "input": dict(request.input),
            "idempotency_key": request.idempotency_key,
            "org_id": request.org_id,
        }
    )
