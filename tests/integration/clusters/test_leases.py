"""ADR-0023 lease-then-LLM for suggested_rule_stub: pending rows invisible to the read path,
stamp-based recovery, usage recorded only on a successful finalize."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from producers.clusters import ClusterPolicy
from producers.clusters.snapshot import request_to_json, stub_request
from tests.integration.clusters.support import (
    CountingSynthesizer,
    failure,
    fetch,
    outbox_events,
    service,
)

pytestmark = pytest.mark.integration


async def _age_pending_leases(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "UPDATE clusters.rule_stub_leases SET generated_at = now() - interval '1 hour', "
            "retry_at = retry_at - interval '1 hour' WHERE generation_mode = 'pending'"
        )
    finally:
        await conn.close()


async def test_a_failed_model_call_publishes_without_a_stub_and_recovery_adds_it(
    database_url: str,
) -> None:
    broken = CountingSynthesizer(fail=True)
    async with service(database_url, broken) as svc:
        await svc.ingest([failure("f-1"), failure("f-2")])
        report = await svc.tick()
        assert (report.leases_won, report.model_failures, report.published) == (1, 1, 1)
        # A pending lease is invisible to the read path.
        assert await fetch(database_url, "SELECT * FROM clusters.rule_stubs") == []
        # Not stale yet: nobody re-claims it, nobody calls again.
        assert (await svc.tick()).leases_recovered == 0
    assert broken.total == 1
    [(_, first)] = await outbox_events(database_url)
    assert first.payload.suggested_rule_stub is None

    await _age_pending_leases(database_url)
    working = CountingSynthesizer()
    registries = [CollectorRegistry() for _ in range(3)]

    async def replica(i: int) -> None:
        async with service(database_url, working, holder=f"r{i}", registry=registries[i]) as svc:
            await svc.tick()

    await asyncio.gather(*(replica(i) for i in range(3)))
    assert working.total == 1  # one replica re-claimed the stale lease
    recovered = sum(
        r.get_sample_value("spectral_clusters_stub_leases_total", {"outcome": "recovered"}) or 0
        for r in registries
    )
    assert recovered == 1
    events = await outbox_events(database_url)
    assert len(events) == 2
    second = events[1][1]
    assert second.payload.suggested_rule_stub
    assert second.payload.cluster_id == first.payload.cluster_id
    assert second.payload.snapshot_hash != first.payload.snapshot_hash
    lease = await fetch(
        database_url, "SELECT generation_mode, attempts, holder FROM clusters.rule_stub_leases"
    )
    assert [(r["generation_mode"], r["attempts"]) for r in lease] == [("llm", 2)]
    usage = await fetch(database_url, "SELECT count(*) AS n FROM clusters.model_usage")
    assert usage[0]["n"] == 1


async def test_a_crashed_winner_holds_the_cluster_until_the_lease_is_stale(
    database_url: str,
) -> None:
    """A winner that died between claim and finalize leaves a pending row: others lose the
    lease and do not publish a stub-less duplicate; after the timeout one of them recovers."""
    synth = CountingSynthesizer()
    async with service(database_url, synth) as svc:
        await svc.ingest([failure("f-1")])
    # The "crashed" winner: claim the lease exactly as a tick would, then vanish.
    async with service(database_url, synth, holder="crashed") as svc:
        async with svc.repository.unit() as unit:
            [evaluated] = await svc._evaluate(
                unit, [c.cluster_id for c in await svc.repository.list_clusters()]
            )
        assert await svc.repository.claim_stub_lease(
            evaluated.facts.cluster_id,
            evaluated.content_hash,
            request_to_json(stub_request(evaluated.facts, evaluated.content)),
            "crashed",
        )
    async with service(database_url, synth, holder="other") as svc:
        report = await svc.tick()
        assert (report.leases_lost, report.published, synth.total) == (1, 0, 0)
        await _age_pending_leases(database_url)
        report = await svc.tick()
    assert (report.leases_recovered, report.published, synth.total) == (1, 1, 1)
    [(_, event)] = await outbox_events(database_url)
    assert event.payload.suggested_rule_stub


async def test_a_stale_lease_for_outdated_content_is_superseded_without_a_call(
    database_url: str,
) -> None:
    broken = CountingSynthesizer(fail=True)
    async with service(database_url, broken) as svc:
        await svc.ingest([failure("f-1")])
        await svc.tick()
    await _age_pending_leases(database_url)
    working = CountingSynthesizer()
    async with service(database_url, working) as svc:
        await svc.ingest([failure("f-2")])  # the cluster moves on
        report = await svc.tick()
    assert (report.leases_recovered, report.leases_superseded) == (1, 1)
    assert working.total == 1  # for the new content only
    modes = await fetch(
        database_url,
        "SELECT generation_mode FROM clusters.rule_stub_leases ORDER BY generation_mode",
    )
    assert [r["generation_mode"] for r in modes] == ["llm", "superseded"]


async def test_usage_is_recorded_only_by_the_finalize_that_changed_a_pending_row(
    database_url: str,
) -> None:
    async with service(database_url, CountingSynthesizer()) as svc:
        await svc.ingest([failure("f-1")])
        cluster = (await svc.repository.list_clusters())[0].cluster_id
        assert await svc.repository.claim_stub_lease(cluster, "h" * 32, '{"input": {}}', "me")
        assert not await svc.repository.claim_stub_lease(cluster, "h" * 32, '{"input": {}}', "you")
        assert await svc.repository.finalize_stub_lease(cluster, "h" * 32, "stub", "m", {"t": 3})
        # A slow second finisher (its lease was recovered meanwhile) changes nothing.
        assert not await svc.repository.finalize_stub_lease(cluster, "h" * 32, "other", "m", {})
    rows = await fetch(database_url, "SELECT usage::text AS u FROM clusters.model_usage")
    assert [r["u"] for r in rows] == ['{"t": 3}']
    stub = await fetch(database_url, "SELECT suggested_rule_stub FROM clusters.rule_stubs")
    assert [r["suggested_rule_stub"] for r in stub] == ["stub"]


async def test_stubs_can_be_turned_off(database_url: str) -> None:
    synth = CountingSynthesizer()
    async with service(database_url, synth, policy=ClusterPolicy(generate_stubs=False)) as svc:
        await svc.ingest([failure("f-1")])
        await svc.tick()
    assert synth.total == 0
    [(_, event)] = await outbox_events(database_url)
    assert event.payload.suggested_rule_stub is None


async def test_other_roles_cannot_reach_the_producer_state(database_url: str) -> None:
    for role in ("spectral_projector", "spectral_operator"):
        conn = await asyncpg.connect(database_url, server_settings={"role": role})
        try:
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.fetch("SELECT * FROM clusters.clusters")
        finally:
            await conn.close()
