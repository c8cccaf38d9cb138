"""What GET /projects/{project_id}/threads (and the MCP tool list_project_threads, the console's
project page) reads for a page of a project's threads after a cursor (project_threads: newest
first, keyset (created_at, thread_id))."""

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
THREADS = 10_000
"""Threads of project 'p' (one a second), among as many of three other projects each."""
DEPTH = THREADS // 2
"""The page asked for starts after the DEPTH-th newest thread of 'p' (with only a few hundred
threads after it, a read of them all and a sort is rightly the cheaper plan)."""
PAGE = 100
"""The API's default page (limit=100); the statement is asked for one row more."""


async def _threads(database_url: str, analysed: bool) -> None:
    async with session(database_url) as admin:
        await admin.execute(
            "INSERT INTO work.threads (thread_id, kind, space_type, space_id, target_ref, "
            "status, idempotency_key, created_at, closed_at) "
            "SELECT md5('t' || g)::uuid, 'rule_stub', 'project', "
            "CASE g % 4 WHEN 0 THEN 'p' ELSE 'q' || g % 4 END, '{}', 'complete', 'i' || g, "
            "now() - g * interval '1 second', now() "
            "FROM generate_series(1, 4 * $1::int) AS g",
            THREADS,
        )
        if analysed:
            await admin.execute("ANALYZE work.threads")


@pytest.mark.parametrize("analysed", [False, True])
async def test_a_later_page_of_a_project_s_threads_reads_that_page_only(
    database_url: str, analysed: bool
) -> None:
    """Guarantee: a page of a project's threads costs a bounded read per row of the page,
    however deep the cursor — not a read of every thread newer than the cursor.

    project_threads continues after the cursor with `($4 IS NULL OR created_at < $4 OR
    (created_at = $4 AND thread_id > $5))`: an OR that no index condition expresses, so the
    scan of threads_by_space (space_type, space_id, created_at DESC) starts at the project's
    newest thread every time and throws away every thread before the cursor — cursor
    pagination that costs what OFFSET does. Following the cursors through a project reads its
    threads pages x pages / 2 times; a project's threads are never removed, so the deep pages
    only get deeper.

    Minimal reproduction: project 'p' with 10,000 closed threads (one a second) among 40,000;
    the page of 100 (101 asked) after its 5,000th newest as spectral_operator read ~5,100 rows
    (analysed) or 10,000 (without statistics: the project's whole history); at the 9,000th,
    9,102. Fixed by an index in the page's order (migration 0062) and the cursor's bound
    repeated as an index condition: 0.001 s at 200,000. Measured by hand
    at 200,000 threads in the project, the page after the 100,000th: 0.04 s (100,102 rows,
    analysed), 0.09-0.12 s without statistics (200,002 rows) — per page, and the thousand
    pages before it cost the same way. The rows counted are every row every scan of the plan
    produced or threw away."""
    await _threads(database_url, analysed)
    async with session(database_url, OPERATOR) as conn:
        after = await conn.fetchrow(
            "SELECT created_at, thread_id FROM work.threads WHERE space_id = 'p' "
            "ORDER BY created_at DESC, thread_id OFFSET $1 - 1 LIMIT 1",
            DEPTH,
        )
        assert after is not None
        args = ["p", False, PAGE + 1, after["created_at"], after["thread_id"]]
        plan = await explained(conn, SQL["project_threads"], args)
    assert plan["Actual Rows"] == PAGE + 1
    read = plan_rows_read(plan)
    assert read <= 4 * (PAGE + 1), read
