"""What the console's budgets page reads to draw each org's spend chart (spend_over_period with
no orgs: every budgeted org's cumulative spend in its current period)."""

from __future__ import annotations

from pathlib import Path

import pytest

import producers.work.domain
from spectral.db.queries import load_queries
from tests.integration.maintenance.support import explained, plan_rows_read, session

pytestmark = pytest.mark.integration

SQL = load_queries(Path(producers.work.domain.__file__).with_name("queries.sql"))
OPERATOR = "spectral_operator"
ORGS = 1_000
"""Orgs with a 'total' budget."""
CHANGES = 2_000
"""Spend changes not folded yet (the claim folds them), in the current hour."""


async def _budgets_and_changes(database_url: str, analysed: bool) -> None:
    async with session(database_url) as admin:
        await admin.execute(
            "INSERT INTO work.budgets (org_id, period, token_limit) "
            "SELECT 'org-' || g, 'total', 1000000 FROM generate_series(1, $1::int) AS g",
            ORGS,
        )
        await admin.execute(
            "INSERT INTO work.spend_changes (reserved_hour, org_id, project_id, thread_id, "
            "parent_thread_id, model, tokens, cost, outstanding, unknown, unknown_tokens, "
            "overrun_tokens) SELECT date_trunc('hour', now()), 'org-' || (1 + g % $2::int), "
            "'p', md5('c' || g)::uuid, NULL, 'm', 10, 1, 0, 0, 0, 0 "
            "FROM generate_series(1, $1::int) AS g",
            CHANGES,
            ORGS,
        )
        if analysed:
            await admin.execute("ANALYZE work.budgets, work.spend_changes")


@pytest.mark.parametrize("analysed", [False, True])
async def test_the_spend_charts_read_each_unfolded_change_once(
    database_url: str, analysed: bool
) -> None:
    """Guarantee: the spend charts of every budgeted org cost a bounded read per org and per
    spend change not folded yet — not their product.

    For a 'total' budget, spend_over_period starts the chart at what was spent before the 31
    days it shows, which adds the unfolded changes of earlier days: a LATERAL subquery
    `SELECT sum(...) FROM work.spend_changes c WHERE c.org_id = b.org_id AND c.reserved_hour <
    b.since`, run once per budgeted org. work.spend_changes has no index, so each run reads
    every unfolded change of every org, and the console's budgets page costs orgs x changes
    (the changes stay unfolded until an executor's next claim).

    Minimal reproduction: 1,000 orgs with a 'total' budget and 2,000 unfolded changes in the
    current hour (two per org); spend_over_period($1 = NULL) as spectral_operator reads
    2,005,000 rows (the changes once per org, with or without statistics). Measured by hand
    at 2,000 orgs and 1,000 changes: 0.16 s per budgets page. The rows counted are every row
    every scan of the plan produced or threw away."""
    await _budgets_and_changes(database_url, analysed)
    async with session(database_url, OPERATOR) as conn:
        plan = await explained(conn, SQL["spend_over_period"], [None])
    read = plan_rows_read(plan)
    assert read <= 10 * (ORGS + CHANGES), read
