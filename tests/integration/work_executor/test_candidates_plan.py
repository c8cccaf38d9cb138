"""What the executor's claim reads to pick its candidates (candidates: the tenants with waiting
items, each one's first items due now in rank order), under the scheduler's lock."""

from __future__ import annotations

from pathlib import Path

import pytest

import consumers.work_executor
from consumers.work_executor.claims import TENANTS_PER_ITEM
from spectral.db.queries import load_queries
from tests.integration.maintenance.support import EXECUTOR, explained, plan_rows_read, session

pytestmark = pytest.mark.integration

CLAIMS_SQL = load_queries(Path(consumers.work_executor.__file__).with_name("claims.sql"))
BACKING_OFF = 2_000
"""Items of org 'a' whose attempt failed, waiting for their retry (not due yet)."""
DUE = 20
"""Items of org 'a' enqueued since, due now."""
WANT = 10
"""Items a claim asks for."""


async def _backing_off_and_due(database_url: str, analysed: bool) -> None:
    async with session(database_url) as admin:
        await admin.execute(
            "INSERT INTO work.threads (thread_id, kind, space_type, space_id, target_ref, "
            "status, idempotency_key) SELECT md5('t' || g)::uuid, 'rule_stub', 's', 's', '{}', "
            "'open', 'i' || g FROM generate_series(1, $1::int) AS g",
            BACKING_OFF + DUE,
        )
        # The failed attempts keep their rank (enqueued an hour ago), their retry 10 minutes on.
        await admin.execute(
            "INSERT INTO work.work_items (work_item_id, thread_id, sequence, status, attempt, "
            "lock_scope, project_id, function_key, input, rank_at, not_before) "
            "SELECT md5('w' || g)::uuid, md5('t' || g)::uuid, 1, 'failed', 1, 'x', 'p', 'f', "
            "'{\"org_id\": \"a\"}', now() - interval '1 hour' + make_interval(secs => g), "
            "now() + interval '10 minutes' FROM generate_series(1, $1::int) AS g",
            BACKING_OFF,
        )
        await admin.execute(
            "INSERT INTO work.work_items (work_item_id, thread_id, sequence, status, "
            "lock_scope, project_id, function_key, input, rank_at, not_before) "
            "SELECT md5('w' || g)::uuid, md5('t' || g)::uuid, 1, 'queued', 'x', 'p', 'f', "
            "'{\"org_id\": \"a\"}', now() - interval '1 minute', now() - interval '1 minute' "
            "FROM generate_series($1::int + 1, $1::int + $2::int) AS g",
            BACKING_OFF,
            DUE,
        )
        if analysed:
            await admin.execute("ANALYZE work.work_items, work.threads")


@pytest.mark.parametrize("analysed", [False, True])
async def test_picking_candidates_skips_items_backing_off_without_reading_them(
    database_url: str, analysed: bool
) -> None:
    """Guarantee: a claim's pick of candidates costs a bounded read per candidate it returns
    and per tenant waiting — not a read of every item of a tenant waiting for a retry.

    candidates takes each served tenant's first items in rank order from work_items_waiting
    (tenant, rank_at, work_item_id), then filters them with not_before <= now(), which that
    index does not hold. A retry keeps its rank, so the items of a tenant whose attempts failed
    (a route's outage, a provider's rate limit, a bad input repeated) sort first and wait for
    their backoff: every claim, under the scheduler's lock, reads each of them, throws it away
    and only then reaches the tenant's items due now — as often as executors claim, until the
    retries come due.

    Minimal reproduction: org 'a' has 2,000 items failed an hour after their rank, due again in
    10 minutes, and 20 items queued since, due now; candidates (10 items, 40 tenants) as
    spectral_executor returns 10 rows and reads 2,024 (2,044 analysed): every item backing off,
    then the first due ones. Measured by hand at 50,000 such items (vacuumed, analysed): ~0.01 s
    of the database per claim, every claim of every executor, each waiting for the scheduler's
    lock behind the one before — until the retries come due. The rows counted are every row
    every scan of the plan produced or threw away."""
    await _backing_off_and_due(database_url, analysed)
    async with session(database_url, EXECUTOR) as conn:
        plan = await explained(conn, CLAIMS_SQL["candidates"], [WANT, WANT * TENANTS_PER_ITEM])
    assert plan["Actual Rows"] == WANT
    read = plan_rows_read(plan)
    assert read <= 10 * (WANT + DUE), read
