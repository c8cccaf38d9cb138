"""What the readers of every budget read while spend changes wait to be folded into the running
totals — as they do while every executor is down, which is when operators look: the list of
every budget (budgets_with_spend with no scopes: the API's `GET /budgets`, the console's Budgets
page, `spectral work budget list`) and the console's spend charts (spend_over_period)."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

import producers.work.domain
from spectral.db.queries import load_queries
from tests.integration.maintenance.support import EXECUTOR, session
from tests.support import explained, plan_rows_read

pytestmark = pytest.mark.integration

SQL = load_queries(Path(producers.work.domain.__file__).with_name("queries.sql"))
OPERATOR = "spectral_operator"
ORGS = 1_000
"""Budgeted orgs (and, for the list, as many budgeted threads)."""
TOKENS = 10
"""Each change's tokens."""


async def _org_budgets(admin: asyncpg.Connection, period: str) -> None:
    await admin.execute(
        "INSERT INTO work.budgets (org_id, period, token_limit) "
        "SELECT 'org' || g, $2, 1000000 FROM generate_series(1, $1::int) AS g",
        ORGS,
        period,
    )


async def _unfolded_changes(
    admin: asyncpg.Connection, changes: int, *, hours_ago: str, parent: str
) -> None:
    """``changes`` spend changes not folded yet, the g-th of org ``1 + g % ORGS`` and of its
    thread; ``hours_ago`` and ``parent`` are SQL expressions of g (its age, its parent thread)."""
    await admin.execute(
        "INSERT INTO work.spend_changes (reserved_hour, org_id, project_id, thread_id, "
        "parent_thread_id, model, tokens, cost, outstanding, unknown, unknown_tokens, "
        "overrun_tokens) "
        f"SELECT date_trunc('hour', now()) - make_interval(hours => {hours_ago}), "
        "'org' || (1 + g % $2::int), 'p', md5('t' || (1 + g % $2::int))::uuid, "
        f"{parent}, 'm', $3, 0.01, 0, 0, 0, 0 FROM generate_series(1, $1::int) AS g",
        changes,
        ORGS,
        TOKENS,
    )


@pytest.mark.parametrize("analysed", [False, True])
async def test_the_list_of_every_budget_reads_the_unfolded_changes_once(
    database_url: str, analysed: bool
) -> None:
    """Guarantee: listing every budget costs a read of the budgets and one of the changes not
    folded yet — not one against every row of the other.

    budgets_with_spend added the changes not folded yet with one join whose condition was a
    CASE over the budget's scope kind (`CASE b.scope_kind WHEN 'org' THEN c.org_id =
    b.scope_id ... END`): no hash or merge join can use it, so the changes were read once per
    budget.

    Minimal reproduction: 1,000 org budgets, 1,000 thread budgets, 1,000 changes not folded
    (each of one org and one thread, half of them with a parent thread); the list returns 2,000
    rows and read 2,013,000. Measured by hand: 5,000 budgets x 1,000 changes, 0.59 s per list
    (0.043 s now)."""
    changes = 1_000
    async with session(database_url) as admin:
        await _org_budgets(admin, "day")
        await admin.execute(
            "INSERT INTO work.scope_budgets (scope_kind, scope_id, period, token_limit) "
            "SELECT 'thread', md5('t' || g)::uuid::text, 'total', 1000000 "
            "FROM generate_series(1, $1::int) AS g",
            ORGS,
        )
        await _unfolded_changes(
            admin,
            changes,
            hours_ago="0",
            parent="CASE WHEN g % 2 = 0 THEN md5('t' || (1 + (g + 1) % $2::int))::uuid END",
        )
        if analysed:
            await admin.execute("ANALYZE work.budgets, work.scope_budgets, work.spend_changes")
    async with session(database_url, EXECUTOR) as conn:
        plan = await explained(conn, SQL["budgets_with_spend"], [None, None])
        rows = await conn.fetch(SQL["budgets_with_spend"], None, None)
    assert plan["Actual Rows"] == 2 * ORGS
    read = plan_rows_read(plan)
    assert read <= 20 * (2 * ORGS + changes), read
    spent = {(r["scope_kind"], r["scope_id"]): r["tokens"] for r in rows}
    # every change counts once for its org and once for its thread, and once more for its
    # parent thread when it has one
    assert sum(v for (kind, _), v in spent.items() if kind == "org") == TOKENS * changes
    assert sum(v for (kind, _), v in spent.items() if kind == "thread") == TOKENS * (
        changes + changes // 2
    )


@pytest.mark.parametrize("analysed", [False, True])
async def test_the_spend_charts_read_the_unfolded_changes_once(
    database_url: str, analysed: bool
) -> None:
    """Guarantee: the spend charts of every budgeted org cost a read of the budgets and one of
    the changes not folded yet — not one per org.

    A total budget's chart starts at what was spent before its 31 days, to which the changes of
    earlier days not folded yet add: spend_over_period summed them in a subquery per org
    (`CROSS JOIN LATERAL (... FROM work.spend_changes c WHERE c.org_id = b.org_id ...)`), and no
    index of work.spend_changes leads with org_id, so every change was read once per org with a
    total budget.

    Minimal reproduction: 1,000 orgs with a total budget, 2,000 changes not folded (half of 40
    days ago, half of today); the charts read 2,005,000 rows. Measured by hand: 1,250 orgs with
    a total budget x 1,000 changes, 0.12 s per page (0.016 s now)."""
    changes = 2_000
    async with session(database_url) as admin:
        await _org_budgets(admin, "total")
        await _unfolded_changes(
            admin, changes, hours_ago="CASE WHEN g % 2 = 0 THEN 40 * 24 ELSE 0 END", parent="NULL"
        )
        if analysed:
            await admin.execute("ANALYZE work.budgets, work.spend_changes")
    async with session(database_url, OPERATOR) as conn:
        plan = await explained(conn, SQL["spend_over_period"], [None])
        rows = await conn.fetch(SQL["spend_over_period"], None)
    read = plan_rows_read(plan)
    assert read <= 20 * (ORGS + changes), read
    # each org's chart starts at its changes of earlier days, then adds today's
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for r in rows:
        first.setdefault(r["org_id"], r["tokens"])
        last[r["org_id"]] = r["tokens"]
    earlier = {f"org{k}": 0 for k in range(1, ORGS + 1)}
    for g in range(2, changes + 1, 2):
        earlier[f"org{1 + g % ORGS}"] += TOKENS
    assert first == earlier
    assert sum(last.values()) == TOKENS * changes
