"""What the operator console reads to draw a page's failure charts (failure_history: each
listed cluster's failure_count per signalled hour)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

import consumers.rule_candidates
from spectral.db.queries import load_queries
from tests.integration.maintenance.support import session
from tests.support import explained, plan_rows_read

pytestmark = pytest.mark.integration

SQL = load_queries(Path(consumers.rule_candidates.__file__).with_name("queries.sql"))
OPERATOR = "spectral_operator"
CLUSTERS = 1_000
"""Clusters signalled in each of the last HOURS hours."""
HOURS = 40
PAGE = 50
"""The console's page of clusters (console.PAGE_SIZE), whose history it asks for."""


def _cluster(g: int) -> uuid.UUID:
    return uuid.UUID(int=g)


@pytest.mark.parametrize("analysed", [False, True])
async def test_a_page_of_failure_history_reads_the_page_s_clusters_only(
    database_url: str, analysed: bool
) -> None:
    """Guarantee: the failure history of a page of clusters costs a bounded read per signalled
    hour of those clusters — not a read of every cluster's history.

    failure_history selects `cluster_id = ANY($1)` from platform.cluster_signal_hours, whose
    only index is its primary key (hour, cluster_id): the hour leads it, so no index finds a
    cluster's rows, and every console page of the inbox (and every cluster's detail page) reads
    the whole record of the last 8 days — every cluster signalled in every hour — to draw the
    charts of the 50 clusters it shows.

    Minimal reproduction: 1,000 clusters signalled in each of the last 40 hours (40,000 rows: at
    a few thousand, a read of the whole table is rightly the cheaper plan); the history of a
    page of 50 as spectral_operator returns 2,000 rows and read 40,000 (with or without
    statistics). Measured by hand at 5,000 clusters signalled every hour for the 8
    days kept (960,000 rows, vacuumed and analysed): 0.08 s per inbox page (9,600 rows
    returned) and 0.06 s per cluster's page (192 rows), the whole table read each time. The
    rows counted are every row every scan of the plan produced or threw away."""
    async with session(database_url) as admin:
        await admin.execute(
            "INSERT INTO platform.cluster_signal_hours (hour, cluster_id, failure_count) "
            "SELECT date_trunc('hour', now()) - make_interval(hours => h), "
            "('00000000-0000-0000-0000-' || lpad(to_hex(g), 12, '0'))::uuid, 1 + h "
            "FROM generate_series(1, $1::int) AS g, generate_series(0, $2::int - 1) AS h",
            CLUSTERS,
            HOURS,
        )
        if analysed:
            await admin.execute("ANALYZE platform.cluster_signal_hours")
    page = [_cluster(g) for g in range(1, CLUSTERS + 1, CLUSTERS // PAGE)]
    async with session(database_url, OPERATOR) as conn:
        plan = await explained(conn, SQL["failure_history"], [page])
    assert plan["Actual Rows"] == PAGE * HOURS
    read = plan_rows_read(plan)
    assert read <= 4 * PAGE * HOURS, read
