"""What the operator console and the API read for a page of the triage inbox (list_candidates:
the open clusters — pending or in review — most severe first, a page of 50)."""

from __future__ import annotations

from pathlib import Path

import pytest

import consumers.rule_candidates
from spectral.db.queries import load_queries
from tests.integration.maintenance.support import explained, plan_rows_read, session

pytestmark = pytest.mark.integration

SQL = load_queries(Path(consumers.rule_candidates.__file__).with_name("queries.sql"))
OPERATOR = "spectral_operator"
OPEN = 1_000
"""Clusters waiting for triage (pending)."""
CLOSED = 39_000
"""Clusters triaged long ago (resolved or dismissed): the inbox's history."""
PAGE = 50
"""The console's page (console.PAGE_SIZE); the statement is asked for one row more."""


async def _inbox(database_url: str, analysed: bool) -> None:
    async with session(database_url) as admin:
        await admin.execute(
            "INSERT INTO platform.rule_candidates_pending (cluster_id, snapshot_hash, rule_id, "
            "workspace_id, severity, failure_count, first_observed_at, last_observed_at, "
            "evidence_bundle, ordered_at, status) "
            "SELECT md5('c' || g)::uuid, 'h', md5('r')::uuid, md5('w')::uuid, "
            "(ARRAY['low', 'medium', 'high'])[1 + g % 3], 1, now() - interval '90 days', "
            "now() - g * interval '1 minute', '[{\"summary\": \"s\"}]', "
            "now() - g * interval '1 minute', "
            "CASE WHEN g <= $1::int THEN 'pending' "
            "     ELSE (ARRAY['resolved', 'dismissed'])[1 + g % 2] END "
            "FROM generate_series(1, $1::int + $2::int) AS g",
            OPEN,
            CLOSED,
        )
        if analysed:
            await admin.execute("ANALYZE platform.rule_candidates_pending")


def _args(after: tuple[object, object, object] = (None, None, None)) -> list[object]:
    # statuses, severity, workspace, assignee, resurfaced only, include deleted, limit, sort,
    # keyset, unassigned only — the console's default view (triage.TriageRepository.page)
    return [
        ["pending", "in_review"],
        None,
        None,
        None,
        False,
        False,
        PAGE + 1,
        "severity",
        *after,
        False,
    ]


@pytest.mark.parametrize("analysed", [False, True])
async def test_a_page_of_the_open_inbox_reads_the_open_clusters_only(
    database_url: str, analysed: bool
) -> None:
    """Guarantee: a page of the open inbox costs a bounded read per open cluster — not a read
    of every cluster ever triaged.

    list_candidates filters and orders on expressions of the sort (k1, k2: CASE $8 ...) over
    platform.rule_candidates_pending, whose only index is its primary key (cluster_id): no
    index finds the open clusters (status), none serves the order, so every page of the
    console's default view and of the API's GET /clusters — the first and every later one —
    reads every row the inbox ever held, resolved, dismissed and soft-deleted ones included,
    to return 51. Resolved and dismissed clusters are never removed (the projection keeps them:
    a resolved cluster may resurface), so the cost of a page grows with the inbox's whole
    history while the open work stays small.

    Minimal reproduction: 1,000 pending clusters and 39,000 resolved or dismissed ones; the
    console's first page (statuses pending and in_review, most severe first, 51 rows) as
    spectral_operator reads 40,000 rows (with or without statistics). Measured by hand at
    5,000 pending among 205,000 clusters: ~0.05 s per page, 205,002 rows read. The rows
    counted are every row every scan of the plan produced or threw away."""
    await _inbox(database_url, analysed)
    async with session(database_url, OPERATOR) as conn:
        plan = await explained(conn, SQL["list_candidates"], _args())
    assert plan["Actual Rows"] == PAGE + 1
    read = plan_rows_read(plan)
    assert read <= 4 * OPEN, read
