"""What the console's spend charts read (spend_over_period: each budgeted org's spend so far in
its period, cumulated) while spend changes wait to be folded into the running totals — as they
do while every executor is down."""

from __future__ import annotations

from pathlib import Path

import pytest

import producers.work.domain
from spectral.db.queries import load_queries
from tests.integration.maintenance.support import session
from tests.support import explained, plan_rows_read

pytestmark = pytest.mark.integration

SQL = load_queries(Path(producers.work.domain.__file__).with_name("queries.sql"))
OPERATOR = "spectral_operator"
ORGS = 1_000
"""Orgs with a total budget."""
CHANGES = 2_000
"""Spend changes not folded yet: half of days before the charts' 31 days, half of today."""


async def _budgets_and_changes(database_url: str, analysed: bool) -> None:
    async with session(database_url) as admin:
        await admin.execute(
            "INSERT INTO work.budgets (org_id, period, token_limit) "
            "SELECT 'org' || g, 'total', 1000000 FROM generate_series(1, $1::int) AS g",
            ORGS,
        )
        await admin.execute(
            "INSERT INTO work.spend_changes (reserved_hour, org_id, project_id, thread_id, "
            "parent_thread_id, model, tokens, cost, outstanding, unknown, unknown_tokens, "
            "overrun_tokens) "
            "SELECT date_trunc('hour', now()) - CASE WHEN g % 2 = 0 THEN interval '40 days' "
            "ELSE interval '0' END, 'org' || (1 + g % $2::int), 'p', NULL, NULL, 'm', 10, 0.01, "
            "0, 0, 0, 0 FROM generate_series(1, $1::int) AS g",
            CHANGES,
            ORGS,
        )
        if analysed:
            await admin.execute("ANALYZE work.budgets, work.spend_changes")


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
    total budget. Changes are folded at the start of every claim, so few wait in normal running;
    they pile up while every executor is down — when operators open the console.

    Minimal reproduction: 1,000 orgs with a total budget, 2,000 changes not folded (half of 40
    days ago, half of today); the charts read over 2,000,000 rows. Measured by hand before:
    2,000 orgs x 1,000 changes, 0.16 s per page."""
    await _budgets_and_changes(database_url, analysed)
    async with session(database_url, OPERATOR) as conn:
        plan = await explained(conn, SQL["spend_over_period"], [None])
        rows = await conn.fetch(SQL["spend_over_period"], None)
    read = plan_rows_read(plan)
    assert read <= 20 * (ORGS + CHANGES), read
    # each org's chart starts at its changes of earlier days, then adds today's
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for r in rows:
        first.setdefault(r["org_id"], r["tokens"])
        last[r["org_id"]] = r["tokens"]
    earlier = {f"org{k}": 0 for k in range(1, ORGS + 1)}
    for g in range(2, CHANGES + 1, 2):
        earlier[f"org{1 + g % ORGS}"] += 10
    assert first == earlier
    assert sum(last.values()) == 10 * CHANGES
