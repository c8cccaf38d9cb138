"""What the executor's claim reads to find the parked items that may resume (resume_parked, the
first statement of every claim transaction)."""

from __future__ import annotations

from pathlib import Path

import pytest

import consumers.work_executor
from spectral.db.queries import load_queries
from tests.integration.maintenance.support import EXECUTOR, session
from tests.support import explained, plan_rows_read

pytestmark = pytest.mark.integration

CLAIMS_SQL = load_queries(Path(consumers.work_executor.__file__).with_name("claims.sql"))
PARKED = 1_000
"""Items of org 'a' parked by its exhausted budget."""
RELEASED = 1_000
"""Reservations of org 'b' released at the horizon, their calls' outcome unknown, after the
items above were parked."""


async def _parked_and_released(database_url: str, analysed: bool) -> None:
    async with session(database_url) as admin:
        await admin.execute(
            "INSERT INTO work.budgets (org_id, period, token_limit, updated_at) "
            "VALUES ('a', 'total', 10, now() - interval '2 hours')"
        )
        await admin.execute(
            "INSERT INTO work.threads (thread_id, kind, space_type, space_id, target_ref, "
            "status, idempotency_key) SELECT md5('t' || g)::uuid, 'rule_stub', 's', 's', '{}', "
            "'open', 'i' || g FROM generate_series(1, $1::int) AS g",
            PARKED + RELEASED,
        )
        await admin.execute(
            "INSERT INTO work.work_items (work_item_id, thread_id, sequence, status, lock_scope, "
            "project_id, function_key, input, park_reason, parked_at, park_scope_kind, "
            "park_scope_id) SELECT md5('w' || g)::uuid, md5('t' || g)::uuid, 1, 'parked', 'x', "
            "'p', 'f', '{\"org_id\": \"a\"}', 'budget', now() - interval '1 hour', 'org', 'a' "
            "FROM generate_series(1, $1::int) AS g",
            PARKED,
        )
        await admin.execute(
            "INSERT INTO work.work_items (work_item_id, thread_id, sequence, status, lock_scope, "
            "project_id, function_key, input, finished_at) SELECT md5('w' || g)::uuid, "
            "md5('t' || g)::uuid, 1, 'applied', 'x', 'p', 'f', '{\"org_id\": \"b\"}', now() "
            "FROM generate_series($1::int + 1, $1::int + $2::int) AS g",
            PARKED,
            RELEASED,
        )
        await admin.execute(
            "INSERT INTO work.spend (work_item_id, attempt, org_id, model, function_key, state, "
            "reserved_tokens, reserved_cost, released_unknown_at, project_id) "
            "SELECT md5('w' || g)::uuid, 1, 'b', 'm', 'f', 'released', 10, 1, "
            "now() - interval '30 minutes', 'p' "
            "FROM generate_series($1::int + 1, $1::int + $2::int) AS g",
            PARKED,
            RELEASED,
        )
        if analysed:
            await admin.execute("ANALYZE work.work_items, work.spend, work.budgets")


@pytest.mark.parametrize("analysed", [False, True])
async def test_finding_the_parked_items_to_resume_reads_each_release_once(
    database_url: str, analysed: bool
) -> None:
    """Guarantee: a claim's look for parked items that may resume costs a bounded read per
    parked item and per reservation released with its outcome unknown — not their product.

    resume_parked tests, for every parked item, EXISTS (a reservation of the item's scope
    released at the horizon after the item was parked) — a correlated subquery whose only
    indexable condition is released_unknown_at > parked_at (spend_released_unknown): each
    parked item reads every reservation released after it was parked, of any scope, and
    throws away those of other scopes. One org's budget exhausted (its items parked) while a
    provider outage leaves other orgs' calls with an unknown outcome (released at the horizon)
    makes every claim transaction — under the scheduler's lock, so every executor waits for
    it — cost parked items x releases.

    Minimal reproduction: 1,000 items of org 'a' parked an hour ago by its 'total' budget
    (unchanged since), 1,000 reservations of org 'b' released with an unknown outcome 30
    minutes ago; resume_parked as spectral_executor resumes nothing and reads 1,001,001 rows
    (analysed; 1,003,000 without statistics: the releases once per parked item), 0.23 s.
    Measured by hand at 5,000 x 5,000: 25 million rows and 5.9 s per claim. The rows counted
    are every row every scan of the plan produced or threw away."""
    await _parked_and_released(database_url, analysed)
    async with session(database_url, EXECUTOR) as conn:
        plan = await explained(conn, CLAIMS_SQL["resume_parked"], [])
    assert plan["Actual Rows"] == 0  # nothing of org 'a' changed: every item stays parked
    read = plan_rows_read(plan)
    assert read <= 10 * (PARKED + RELEASED), read
