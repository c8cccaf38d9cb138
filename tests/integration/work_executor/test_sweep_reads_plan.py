"""What the executor's periodic sweep reads to refresh its queue gauges (queue_depth: items per
live status, and the items dead-lettered)."""

from __future__ import annotations

from pathlib import Path

import pytest

import consumers.work_executor
from spectral.db.queries import load_queries
from tests.integration.maintenance.support import EXECUTOR, session
from tests.support import explained, plan_rows_read

pytestmark = pytest.mark.integration

READS_SQL = load_queries(Path(consumers.work_executor.__file__).with_name("reads.sql"))
FINISHED = 5_000
"""Items applied (the work record keeps them: retention only measures it)."""
LIVE = 10
"""Items queued."""
DEAD = 5
"""Items dead-lettered."""


async def _history_and_queue(database_url: str, analysed: bool) -> None:
    async with session(database_url) as admin:
        await admin.execute(
            "INSERT INTO work.threads (thread_id, kind, space_type, space_id, target_ref, "
            "status, idempotency_key) SELECT md5('t' || g)::uuid, 'rule_stub', 's', 's', '{}', "
            "'open', 'i' || g FROM generate_series(1, $1::int) AS g",
            FINISHED + LIVE + DEAD,
        )
        await admin.execute(
            "INSERT INTO work.work_items (work_item_id, thread_id, sequence, status, lock_scope, "
            "project_id, function_key, input, finished_at) SELECT md5('w' || g)::uuid, "
            "md5('t' || g)::uuid, 1, CASE WHEN g <= $1 THEN 'applied' ELSE 'dead_letter' END, "
            "'x', 'p', 'f', '{\"org_id\": \"o\"}', now() - interval '1 day' "
            "FROM generate_series(1, $1::int + $2::int) AS g",
            FINISHED,
            DEAD,
        )
        await admin.execute(
            "INSERT INTO work.work_items (work_item_id, thread_id, sequence, status, lock_scope, "
            "project_id, function_key, input) SELECT md5('w' || g)::uuid, md5('t' || g)::uuid, "
            "1, 'queued', 'x', 'p', 'f', '{\"org_id\": \"o\"}' "
            "FROM generate_series($1::int + 1, $1::int + $2::int) AS g",
            FINISHED + DEAD,
            LIVE,
        )
        if analysed:
            await admin.execute("ANALYZE work.work_items, work.threads")


@pytest.mark.parametrize("analysed", [False, True])
async def test_the_queue_gauges_read_the_live_and_dead_lettered_items_only(
    database_url: str, analysed: bool
) -> None:
    """Guarantee: refreshing the queue gauges costs a bounded read per item live or
    dead-lettered — not a read of every item the work record ever finished.

    queue_depth counts `status NOT IN ('applied', 'canceled')`: no index serves a NOT IN (the
    partial indexes hold the waiting, the leased and the parked items, none the dead-lettered),
    so every sweep of every executor reads the whole of work.work_items — every applied and
    canceled item, which no retention prunes — to count the few items live.

    Minimal reproduction: 5,000 items applied, 5 dead-lettered, 10 queued; queue_depth as
    spectral_executor returns 2 rows (15 items) and reads 5,015 rows, with or without
    statistics. Measured by hand at 1,000,000 applied items (vacuumed, analysed): ~0.07 s
    per sweep, per executor, growing with the record for ever (retention only measures the
    work record: kept by design). The rows counted are every row
    every scan of the plan produced or threw away."""
    await _history_and_queue(database_url, analysed)
    async with session(database_url, EXECUTOR) as conn:
        plan = await explained(conn, READS_SQL["queue_depth"], [])
    assert plan["Actual Rows"] == 2
    read = plan_rows_read(plan)
    assert read <= 10 * (LIVE + DEAD), read
