"""What the executor's claim reads to park the waiting items of a scope whose budget is used up
(park), under the scheduler's lock."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

import consumers.work_executor
from spectral.db.queries import load_queries
from tests.integration.maintenance.support import EXECUTOR, explained, plan_rows_read, session

pytestmark = pytest.mark.integration

CLAIMS_SQL = load_queries(Path(consumers.work_executor.__file__).with_name("claims.sql"))
OTHERS = 5_000
"""Items of 50 other orgs and projects, waiting (the queue's backlog)."""
WAITING = 10
"""Items of org 'a' (project 'pa') waiting, due now."""


async def _backlog_and_waiting(database_url: str, analysed: bool) -> None:
    async with session(database_url) as admin:
        await admin.execute(
            "INSERT INTO work.threads (thread_id, kind, space_type, space_id, target_ref, "
            "status, idempotency_key) SELECT md5('t' || g)::uuid, 'rule_stub', 's', 's', '{}', "
            "'open', 'i' || g FROM generate_series(1, $1::int) AS g",
            OTHERS + WAITING,
        )
        await admin.execute(
            "INSERT INTO work.work_items (work_item_id, thread_id, sequence, status, lock_scope, "
            "project_id, function_key, input) SELECT md5('w' || g)::uuid, "
            "md5('t' || g)::uuid, 1, 'queued', 'x', 'p' || g % 50, 'f', "
            "jsonb_build_object('org_id', 'o' || g % 50) "
            "FROM generate_series(1, $1::int) AS g",
            OTHERS,
        )
        await admin.execute(
            "INSERT INTO work.work_items (work_item_id, thread_id, sequence, status, lock_scope, "
            "project_id, function_key, input) SELECT md5('w' || g)::uuid, md5('t' || g)::uuid, "
            "1, 'queued', 'x', 'pa', 'f', '{\"org_id\": \"a\"}' "
            "FROM generate_series($1::int + 1, $1::int + $2::int) AS g",
            OTHERS,
            WAITING,
        )
        if analysed:
            await admin.execute("ANALYZE work.work_items, work.threads")


def _item(g: int) -> uuid.UUID:
    import hashlib  # noqa: PLC0415

    return uuid.UUID(hashlib.md5(f"w{g}".encode()).hexdigest())  # noqa: S324 - as md5() above


@pytest.mark.parametrize("kind", ["org", "project"])
@pytest.mark.parametrize("analysed", [False, True])
async def test_parking_a_scope_reads_its_waiting_items_only(
    database_url: str, analysed: bool, kind: str
) -> None:
    """Guarantee: parking the items of an org or a project whose budget is used up costs a
    bounded read per item of that scope waiting — not a read of every item waiting.

    park finds an org's waiting items by `w.org_id = scope` and a project's by
    `w.project_id = scope`; no index of work_items leads with either for waiting items
    (work_items_waiting leads with tenant, 'org:' || org_id; work_items_parked holds parked
    items only), and the items it then locks and updates are joined back by a plan made for the
    whole scope's estimate: each park reads every item waiting (the backlog of every other
    tenant), two or three times, under the scheduler's lock. An org that used its budget up
    and keeps enqueueing has its new items refused and parked claim after claim.

    Minimal reproduction: 5,000 items of 50 other orgs and projects waiting, 10 items of org
    'a' (project 'pa') waiting; park of one refused item naming the org (or the project) as
    spectral_executor parks 10 items and reads 10,167 rows (15,068 analysed), the org's or the
    project's alike. Measured by hand at 50,000 items waiting (vacuumed, analysed): 50,068
    rows read and ~0.013 s per park; with 150,000 finished items kept beside them, 100,087 rows
    (project). The rows counted are every row every scan of the plan produced or threw away."""
    await _backlog_and_waiting(database_url, analysed)
    scope = "a" if kind == "org" else "pa"
    args = [[_item(OTHERS + 1)], [kind], [scope], ["budget"]]
    async with session(database_url, EXECUTOR) as conn:
        plan = await explained(conn, CLAIMS_SQL["park"], args)
    assert plan["Actual Rows"] == WAITING
    read = plan_rows_read(plan)
    assert read <= 20 * WAITING, read
