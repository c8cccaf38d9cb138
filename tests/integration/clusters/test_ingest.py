"""Ingest: idempotent by failure_id; cluster_id minted once per key, stable across restarts."""

from __future__ import annotations

import asyncio

import pytest

from producers.clusters import ClusterPolicy
from tests.integration.clusters.support import failure, fetch, outbox_events, service

pytestmark = pytest.mark.integration


async def test_ingesting_the_same_failures_again_changes_nothing(database_url: str) -> None:
    batch = [failure(f"f-{i}", rule_n=i % 3, minutes=i) for i in range(50)]
    async with service(database_url) as svc:
        first = await svc.ingest(batch)
        before = await fetch(database_url, "SELECT * FROM clusters.clusters ORDER BY cluster_id")
        again = await svc.ingest(batch)
        shuffled = await svc.ingest(list(reversed(batch)) + batch)
        after = await fetch(database_url, "SELECT * FROM clusters.clusters ORDER BY cluster_id")
    assert (first.inserted, first.clusters_minted) == (50, 3)
    assert (again.inserted, again.duplicates, again.clusters_minted) == (0, 50, 0)
    assert (shuffled.inserted, shuffled.duplicates) == (0, 100)
    assert before == after  # not even a revision bump: nothing to re-evaluate
    count = await fetch(database_url, "SELECT count(*) AS n FROM clusters.failures")
    assert count[0]["n"] == 50


async def test_ingest_lines_reports_invalid_lines_and_keeps_the_rest(database_url: str) -> None:
    good = failure("f-1").model_dump_json()
    lines = [good, "", "{nope", good.replace('"f-1"', '"f-2"'), '{"failure_id": "x"}']
    async with service(database_url) as svc:
        summary = await svc.ingest_lines(lines)
    assert (summary.received, summary.inserted, summary.invalid) == (4, 2, 2)
    assert summary.errors[0].startswith("line 3: not JSON")
    assert summary.errors[1].startswith("line 5: ")


async def test_a_restart_keeps_every_cluster_id(database_url: str) -> None:
    keys = [(rule_n, sig) for rule_n in range(4) for sig in ("timeout", "denied", "missing")]
    async with service(database_url, policy=ClusterPolicy(generate_stubs=False)) as svc:
        await svc.ingest([failure(f"a-{r}-{s}", rule_n=r, signature=s) for r, s in keys])
        await svc.tick()
        before = {
            (c.rule_id, c.signature): c.cluster_id for c in await svc.repository.list_clusters()
        }
    published_before = {key for key, _ in await outbox_events(database_url)}

    # A new process (new pool, new holder): the same keys resolve to the same cluster_ids.
    async with service(database_url, policy=ClusterPolicy(generate_stubs=False)) as svc:
        await svc.ingest(
            [failure(f"b-{r}-{s}", rule_n=r, signature=s, minutes=5) for r, s in keys]
            + [failure("c-new", rule_n=9, signature="new")]
        )
        await svc.tick()
        after = {
            (c.rule_id, c.signature): c.cluster_id for c in await svc.repository.list_clusters()
        }
    assert len(before) == len(keys)
    assert {k: after[k] for k in before} == before
    assert len(after) == len(keys) + 1
    events = await outbox_events(database_url)
    assert {str(v) for v in before.values()} == published_before
    # Second round: one new snapshot per old cluster under its old id, one for the new cluster.
    second = events[len(published_before) :]
    assert sorted(key for key, _ in second) == sorted(str(v) for v in after.values())
    for key, envelope in second:
        assert str(envelope.payload.cluster_id) == key
        assert envelope.idempotency_key == f"{key}:{envelope.payload.snapshot_hash}"


async def test_replicas_ingesting_a_new_key_at_once_mint_one_cluster(database_url: str) -> None:
    async def one(replica: int) -> None:
        async with service(database_url) as svc:
            await svc.ingest(
                [failure(f"r{replica}-{i}", signature=f"shared-{i % 4}") for i in range(40)]
            )

    await asyncio.gather(*(one(r) for r in range(5)))
    clusters = await fetch(
        database_url,
        "SELECT c.signature, count(f.*) AS n FROM clusters.clusters c "
        "JOIN clusters.failures f USING (cluster_id) GROUP BY c.signature ORDER BY 1",
    )
    assert [(r["signature"], r["n"]) for r in clusters] == [(f"shared-{i}", 50) for i in range(4)]
