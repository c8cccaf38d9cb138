"""Rule-stub leases of the old schema, mid-flight, move onto the work ledger without losing or
re-paying anything: a database with a lease in every state (finalized, given up, superseded,
waiting for its retry, in flight when its holder stopped) is migrated, then the tick and the
work executor run. Finalized and given-up stubs are never paid for again; a due retry is made
once more; a call in flight (its outcome unknown) is re-issued under the key the old service
sent it with, so a gateway that honours the key bills it once; every paid call, old and new, is
on the ledger."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from uuid import UUID

import asyncpg
import pytest

from producers.clusters import ClusterPolicy
from spectral.db.migrate import migrate
from spectral.devstack import Endpoints
from spectral.llm.seam import SynthesisRequest
from spectral.settings import Settings
from tests.integration.clusters.legacy_stubs import (
    MIGRATION,
    OldLease,
    insert_lease,
    old_requests,
)
from tests.integration.clusters.support import (
    CountingSynthesizer,
    failure,
    fetch,
    outbox_events,
    rule,
    service,
    settle_stubs,
    stub_executor,
)
from tests.support import empty_database, migrations_before

pytestmark = pytest.mark.integration

OLD_HASH = "0" * 64  # a content the superseded lease's cluster moved on from


@pytest.fixture
async def unmigrated(stack: Endpoints) -> AsyncIterator[str]:
    async with empty_database(stack.database_url, "spectral_stubconv_") as url:
        yield url


async def _old_leases(url: str, asked: dict[UUID, SynthesisRequest]) -> dict[str, UUID]:
    """One lease per state, as the old service left them; the cluster of each state."""
    states = {
        "llm": OldLease("llm", "old stub", model="old-model"),
        "failed": OldLease("failed", attempts=3, error="max_attempts_exceeded"),
        "superseded": OldLease("superseded"),
        "retry": OldLease("pending", retry_in=timedelta(seconds=-1), error="gateway timed out"),
        "in_flight": OldLease("pending"),
    }
    conn = await asyncpg.connect(url)
    try:
        by_rule = {
            r["rule_id"]: r["cluster_id"]
            for r in await conn.fetch("SELECT cluster_id, rule_id FROM clusters.clusters")
        }
        clusters = {state: by_rule[rule(n)] for n, state in enumerate(states, start=1)}
        for state, lease in states.items():
            request = asked[clusters[state]]
            content = OLD_HASH if state == "superseded" else None
            await insert_lease(conn, clusters[state], request, lease, content=content)
    finally:
        await conn.close()
    return clusters


async def test_stub_leases_mid_flight_move_onto_the_ledger_and_nothing_is_paid_twice(
    unmigrated: str, tmp_path: Path, settings: Settings
) -> None:
    url = unmigrated
    await migrate(url, migrations_before(MIGRATION, tmp_path))
    policy = ClusterPolicy()
    async with service(url, policy=policy) as svc:
        await svc.ingest(
            [
                failure(f"f-{n}-{i}", rule_n=n, signature=f"s{n}")
                for n in range(1, 6)
                for i in (1, 2)
            ]
        )
    asked = await old_requests(url, policy)
    clusters = await _old_leases(url, asked)
    key = {state: asked[cluster].idempotency_key for state, cluster in clusters.items()}

    report = await migrate(url)
    assert [m for m in report.applied if m.endswith(MIGRATION.removesuffix(".sql"))]

    migrated = {
        r["cluster"]: dict(r)
        for r in await fetch(
            url,
            "SELECT (w.input ->> 'cluster_id')::uuid AS cluster, w.work_item_id, w.status, "
            "w.attempt FROM work.work_items w WHERE w.function_key = 'rule_stub'",
        )
    }
    item = {state: migrated[cluster]["work_item_id"] for state, cluster in clusters.items()}
    assert {s: (migrated[c]["status"], migrated[c]["attempt"]) for s, c in clusters.items()} == {
        "llm": ("applied", 1),
        "failed": ("dead_letter", 3),
        "superseded": ("canceled", 1),
        "retry": ("failed", 1),
        "in_flight": ("claimed", 1),
    }

    model = CountingSynthesizer()
    async with service(url, policy=policy) as svc:
        await svc.tick()
        async with stub_executor(url, settings, model) as executor:
            await settle_stubs(executor, url)
        await svc.tick()
        await svc.tick()

    [current] = await fetch(
        url,
        "SELECT work_item_id FROM work.work_items WHERE function_key = 'rule_stub' "
        "AND input ->> 'cluster_id' = $1 AND work_item_id <> $2",
        str(clusters["superseded"]),
        item["superseded"],
    )
    # Finalized, given-up and superseded stubs are never paid again. The retry that was due is
    # made (attempt 2); the call in flight when its holder stopped has an unknown outcome: it is
    # re-issued, as every such call on the ledger, under the key it went out with (the old
    # service's). The superseded cluster's current content is asked once.
    assert dict(model.calls) == {
        f"{item['retry']}:2": 1,
        key["in_flight"]: 1,
        f"{current['work_item_id']}:1": 1,
    }

    prompts = await fetch(
        url,
        "SELECT work_item_id, array_agg(payload ->> 'idempotency_key' ORDER BY attempt) AS keys "
        "FROM work.ledger_entries WHERE entry_type = 'prompt' GROUP BY 1",
    )
    paid = {r["work_item_id"]: r["keys"] for r in prompts}
    # Every paid call is on the ledger: the old ones (moved with their leases, under the key
    # they were sent with) and the new ones; nothing else.
    assert paid == {
        item["llm"]: [key["llm"]],
        item["failed"]: [key["failed"]] * 3,
        item["superseded"]: [key["superseded"]],
        item["retry"]: [key["retry"], f"{item['retry']}:2"],
        item["in_flight"]: [key["in_flight"]],
        current["work_item_id"]: [f"{current['work_item_id']}:1"],
    }

    stubs = {
        e.payload.cluster_id: e.payload.suggested_rule_stub for _, e in await outbox_events(url)
    }
    assert stubs[clusters["llm"]] == "old stub"  # the paid stub of before, published, not lost
    assert stubs[clusters["failed"]] is None
    assert all(stubs[clusters[s]] for s in ("superseded", "retry", "in_flight"))
    view = await fetch(url, "SELECT cluster_id FROM clusters.rule_stubs")
    assert len(view) == 4
