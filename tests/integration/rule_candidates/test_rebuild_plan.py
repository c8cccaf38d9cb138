"""What a rebuild costs at its end: the churn record of this hour forgets what the replay added
(rebuild.sql, forget_signal_burst), whatever memory PostgreSQL may use for it."""

from __future__ import annotations

from pathlib import Path

import pytest

import consumers.rule_candidates
from spectral.db.queries import load_queries
from tests.integration.maintenance.support import session
from tests.support import explained, plan_rows_read

pytestmark = pytest.mark.integration

SQL = load_queries(Path(consumers.rule_candidates.__file__).with_name("rebuild.sql"))
PROJECTOR = "spectral_projector"
BEFORE = 2_000
"""Clusters signalled this hour before the rebuild (kept)."""
ADDED = 2_000
"""Clusters the replay signalled this hour (forgotten)."""


async def _signal(database_url: str, first: int, count: int) -> None:
    async with session(database_url) as admin:
        await admin.execute(
            "INSERT INTO platform.cluster_signal_hours (hour, cluster_id, failure_count) "
            "SELECT date_trunc('hour', now()), "
            "('00000000-0000-0000-0000-' || lpad(to_hex(g), 12, '0'))::uuid, 1 "
            "FROM generate_series($1::int, $1::int + $2::int - 1) AS g",
            first,
            count,
        )


async def test_the_rebuild_forgets_its_signals_in_one_pass_even_past_work_mem(
    database_url: str,
) -> None:
    """Guarantee: forgetting the replay's signals reads this hour's churn record and the saved
    one once each — not one against every row of the other.

    forget_signal_burst deleted `cluster_id NOT IN (SELECT cluster_id FROM
    rebuild_signal_hour)`. PostgreSQL hashes such a subquery only while the planner expects
    the hash to fit in work_mem x hash_mem_multiplier; past it (hundreds of thousands of
    clusters signalled this hour at the defaults, 4 MB x 2) the subquery is materialized and
    scanned again for every row of the hour, so the rebuild's last statement — inside the one
    transaction that holds the projection's locks — turns quadratic. The test shrinks the
    memory (64 kB x 1) instead of writing a million clusters: 2,000 before and 2,000 added read
    6,010,000 rows where a read of each side is 6,000. An anti-join (`NOT EXISTS`) spills its
    hash to disk in batches instead."""
    await _signal(database_url, 1, BEFORE)
    async with session(database_url, PROJECTOR) as conn, conn.transaction():
        await conn.execute("SET LOCAL work_mem = '64kB'")
        await conn.execute("SET LOCAL hash_mem_multiplier = 1")
        await conn.execute(SQL["save_signal_hour"])
        await _signal(database_url, BEFORE + 1, ADDED)
        plan = await explained(conn, SQL["forget_signal_burst"], [])
    assert plan["Actual Rows"] == 0  # a DELETE returns nothing; its rows are its child's
    deleted = plan["Plans"][0]["Actual Rows"]
    assert deleted == ADDED
    read = plan_rows_read(plan)
    assert read <= 4 * (BEFORE + ADDED + BEFORE), read
