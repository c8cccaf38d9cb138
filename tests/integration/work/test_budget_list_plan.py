"""What the list of every budget reads (budgets_with_spend with no scopes: the API's
`GET /budgets`, the console's Budgets page, `spectral work budget list`) while spend changes wait
to be folded into the running totals — as they do while every executor is down."""

from __future__ import annotations

from pathlib import Path

import pytest

import producers.work.domain
from spectral.db.queries import load_queries
from tests.integration.maintenance.support import EXECUTOR, session
from tests.support import explained, plan_rows_read

pytestmark = pytest.mark.integration

SQL = load_queries(Path(producers.work.domain.__file__).with_name("queries.sql"))
ORGS = 1_000
"""Org budgets, and as many thread budgets."""
CHANGES = 1_000
"""Spend changes not folded yet (each of an org, a project, a thread and a route)."""


async def _budgets_and_changes(database_url: str, analysed: bool) -> None:
    async with session(database_url) as admin:
        await admin.execute(
            "INSERT INTO work.budgets (org_id, period, token_limit) "
            "SELECT 'org' || g, 'day', 1000000 FROM generate_series(1, $1::int) AS g",
            ORGS,
        )
        await admin.execute(
            "INSERT INTO work.scope_budgets (scope_kind, scope_id, period, token_limit) "
            "SELECT 'thread', md5('t' || g)::uuid::text, 'total', 1000000 "
            "FROM generate_series(1, $1::int) AS g",
            ORGS,
        )
        await admin.execute(
            "INSERT INTO work.spend_changes (reserved_hour, org_id, project_id, thread_id, "
            "parent_thread_id, model, tokens, cost, outstanding, unknown, unknown_tokens, "
            "overrun_tokens) "
            "SELECT date_trunc('hour', now()), 'org' || (1 + g % $2::int), 'p', "
            "md5('t' || (1 + g % $2::int))::uuid, CASE WHEN g % 2 = 0 THEN "
            "md5('t' || (1 + (g + 1) % $2::int))::uuid END, 'm', 10, 0.01, 0, 0, 0, 0 "
            "FROM generate_series(1, $1::int) AS g",
            CHANGES,
            ORGS,
        )
        if analysed:
            await admin.execute("ANALYZE work.budgets, work.scope_budgets, work.spend_changes")


@pytest.mark.parametrize("analysed", [False, True])
async def test_the_list_of_every_budget_reads_the_unfolded_changes_once(
    database_url: str, analysed: bool
) -> None:
    """Guarantee: listing every budget costs a read of the budgets and one of the changes not
    folded yet — not one against every row of the other.

    budgets_with_spend added the changes not folded yet with one join whose condition was a
    CASE over the budget's scope kind (`CASE b.scope_kind WHEN 'org' THEN c.org_id =
    b.scope_id ... END`): no hash or merge join can use it, so the changes were read once per
    budget. Changes are folded at the start of every claim, so few wait in normal running; they
    pile up while every executor is down — when operators open the Budgets page.

    Minimal reproduction: 1,000 org budgets, 1,000 thread budgets, 1,000 changes not folded
    (each of one org and one thread, half of them with a parent thread); the list returns 2,000
    rows and read over 2,000,000. Measured by hand before: 5,000 budgets x 1,000 changes,
    0.8-0.94 s per list."""
    await _budgets_and_changes(database_url, analysed)
    async with session(database_url, EXECUTOR) as conn:
        plan = await explained(conn, SQL["budgets_with_spend"], [None, None])
        rows = await conn.fetch(SQL["budgets_with_spend"], None, None)
    assert plan["Actual Rows"] == 2 * ORGS
    read = plan_rows_read(plan)
    assert read <= 20 * (2 * ORGS + CHANGES), read
    spent = {(r["scope_kind"], r["scope_id"]): r["tokens"] for r in rows}
    # every change counts once for its org and once for its thread, and once more for its
    # parent thread when it has one (never twice for a thread that is both)
    assert sum(v for (kind, _), v in spent.items() if kind == "org") == 10 * CHANGES
    assert sum(v for (kind, _), v in spent.items() if kind == "thread") == 10 * (
        CHANGES + CHANGES // 2
    )
