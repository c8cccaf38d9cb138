"""What a claim reads to admit calls (budgets_with_spend for the scopes of the items it may
lease: their orgs, projects, threads, parent threads and routes), under the scheduler's lock;
the API's read of one budget reads the same way."""

from __future__ import annotations

from pathlib import Path

import pytest

import producers.work.domain
from spectral.db.queries import load_queries
from tests.integration.maintenance.support import EXECUTOR, session
from tests.support import explained, plan_rows_read

pytestmark = pytest.mark.integration

SQL = load_queries(Path(producers.work.domain.__file__).with_name("queries.sql"))
BUDGETS = 20_000
"""Thread budgets set over time (one per budgeted thread; none is removed when its thread
ends)."""


async def _budgets(database_url: str, analysed: bool) -> list[str]:
    async with session(database_url) as admin:
        await admin.execute(
            "INSERT INTO work.scope_budgets (scope_kind, scope_id, period, token_limit) "
            "SELECT 'thread', md5('b' || g)::uuid::text, 'total', 1000000 "
            "FROM generate_series(1, $1::int) AS g",
            BUDGETS,
        )
        await admin.execute(
            "INSERT INTO work.budgets (org_id, period, token_limit) VALUES ('o', 'day', 1000000)"
        )
        if analysed:
            await admin.execute("ANALYZE work.scope_budgets, work.budgets")
        return [
            str(r[0])
            for r in await admin.fetch(
                "SELECT md5('b' || g)::uuid FROM generate_series($1::int - 1, $1::int) AS g",
                BUDGETS,
            )
        ]


@pytest.mark.parametrize("analysed", [False, True])
async def test_a_claim_reads_the_budgets_of_its_scopes_only(
    database_url: str, analysed: bool
) -> None:
    """Guarantee: the budgets of a claim's few scopes cost a bounded read per scope — not a
    read of every budget ever set.

    budgets_with_spend keeps the budgets asked for with `(b.scope_kind, b.scope_id) IN (SELECT
    * FROM unnest(kinds, ids))` over the view work.budget_scopes (work.budgets UNION ALL
    work.scope_budgets): the planner does not turn the row comparison into primary key
    lookups in either branch, and reads both tables whole, testing each row against the list.
    Thread budgets are one per budgeted thread and stay after their thread ends (only an
    operator removes one), so every claim transaction — under the scheduler's lock: every
    executor waits for it — and every API read of one budget costs every budget ever set.

    Minimal reproduction: 20,000 'total' thread budgets and one org budget; the budgets of
    five scopes (org 'o', project 'p', route 'm', two of the threads) as spectral_executor
    return 3 rows and read 20,023 (with or without statistics). Measured by hand: 20,000
    budgets, 0.055-0.12 s per read; 200,000 budgets, 1.0-1.3 s per claim. The rows counted
    are every row every scan of the plan produced or threw away."""
    threads = await _budgets(database_url, analysed)
    kinds = ["org", "project", "route", "thread", "thread"]
    ids = ["o", "p", "m", *threads]
    async with session(database_url, EXECUTOR) as conn:
        plan = await explained(conn, SQL["budgets_with_spend"], [kinds, ids])
    assert plan["Actual Rows"] == 3  # the org's budget and the two threads'
    read = plan_rows_read(plan)
    assert read <= 100, read
