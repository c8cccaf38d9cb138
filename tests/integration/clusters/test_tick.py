"""tick: snapshots through the outbox only when the hash changes; severity and evidence from
the pure policies; several replicas at once."""

from __future__ import annotations

import random

import asyncpg
import pytest

from producers.clusters import ClusterPolicy, Criticality, SeverityPolicy
from producers.clusters.evidence import EvidenceCandidate, select_evidence
from tests.integration.clusters.support import (
    failure,
    outbox_events,
    rule,
    service,
)

pytestmark = pytest.mark.integration

NO_STUBS = ClusterPolicy(generate_stubs=False)


async def test_a_snapshot_is_published_only_when_its_hash_changes(database_url: str) -> None:
    async with service(database_url, policy=NO_STUBS) as svc:
        await svc.ingest([failure(f"f-{i}", rule_n=i % 4, minutes=i) for i in range(40)])
        first = await svc.tick()
        assert (first.evaluated, first.published) == (4, 4)
        assert (await svc.tick()).evaluated == 0  # nothing changed: nothing evaluated
        await svc.ingest([failure("f-3", rule_n=3, minutes=3)])  # a duplicate
        assert (await svc.tick()).published == 0
        await svc.ingest([failure("f-new", rule_n=2, minutes=100)])
        third = await svc.tick()
    assert (third.evaluated, third.published) == (1, 1)
    events = await outbox_events(database_url)
    assert len(events) == 5
    key, last = events[-1]
    assert last.payload.rule_id == rule(2)
    assert last.payload.failure_count == 11
    assert key == str(last.payload.cluster_id)
    assert last.idempotency_key == f"{key}:{last.payload.snapshot_hash}"
    assert last.event_type == "platform.failure_cluster.detected"
    assert (last.source, last.target) == ("platform", "platform")


async def test_a_re_evaluation_with_the_same_content_publishes_nothing(database_url: str) -> None:
    async with service(database_url, policy=NO_STUBS) as svc:
        await svc.ingest([failure(f"f-{i}") for i in range(3)])
        await svc.tick()
        # Force a re-evaluation (as after a crash between evaluation and mark): same hash.
        conn = await asyncpg.connect(database_url)
        try:
            await conn.execute("UPDATE clusters.clusters SET evaluated_revision = 0")
        finally:
            await conn.close()
        report = await svc.tick()
    assert (report.evaluated, report.published) == (1, 0)
    assert len(await outbox_events(database_url)) == 1


async def test_severity_follows_size_and_rule_criticality(database_url: str) -> None:
    policy = ClusterPolicy(
        generate_stubs=False,
        severity=SeverityPolicy(medium_size=3, high_size=6, medium_rate=99, high_rate=99),
    )
    async with service(database_url, policy=policy) as svc:
        await svc.set_criticality(rule(2), Criticality.CRITICAL)
        await svc.set_criticality(rule(3), Criticality.LOW)
        await svc.ingest(
            [failure(f"a-{i}", rule_n=1) for i in range(4)]  # medium
            + [failure("b-0", rule_n=2)]  # low base, critical -> high
            + [failure(f"c-{i}", rule_n=3) for i in range(4)]  # medium, low criticality -> low
        )
        await svc.tick()
    severity = {e.payload.rule_id: e.payload.severity for _, e in await outbox_events(database_url)}
    assert severity == {rule(1): "medium", rule(2): "high", rule(3): "low"}


async def test_min_failures_holds_a_cluster_back_until_it_is_big_enough(database_url: str) -> None:
    policy = ClusterPolicy(generate_stubs=False, min_failures=3)
    async with service(database_url, policy=policy) as svc:
        await svc.ingest([failure("f-1"), failure("f-2")])
        assert (await svc.tick()).published == 0
        await svc.ingest([failure("f-3")])
        assert (await svc.tick()).published == 1


async def test_evidence_is_the_policy_choice_over_all_failures(database_url: str) -> None:
    rng = random.Random(3)
    batch = [
        failure(f"f-{i:04d}", minutes=rng.randrange(600), summary=f"mode {rng.randrange(14)}")
        for i in range(400)
    ]
    async with service(database_url, policy=NO_STUBS) as svc:
        await svc.ingest(batch)
        await svc.tick()
    [(_, event)] = await outbox_events(database_url)
    counts: dict[str, int] = {}
    for f in batch:
        counts[f.summary] = counts.get(f.summary, 0) + 1
    expected = select_evidence(
        EvidenceCandidate(f.failure_id, f.observed_at, f.summary, counts[f.summary]) for f in batch
    )
    assert [r.failure_id for r in event.payload.evidence_bundle] == [e.failure_id for e in expected]
    assert len(event.payload.evidence_bundle) == 10
    assert event.payload.failure_count == 400
    assert event.payload.first_observed_at == min(f.observed_at for f in batch)
    assert event.payload.last_observed_at == max(f.observed_at for f in batch)
