"""The engine's dedup statements stay index probes under row-level security, with custom and
generic plans alike: a policy's quals once turned `idempotency_key = ANY($2)` into a scan of
every row of the consumer (150-280 ms a batch at 600,000 keys)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import asyncpg
import pytest

from spectral.engine.keys import dedup_keys
from tests.integration.maintenance.support import ENGINE_SQL, PROJECTOR, session

pytestmark = pytest.mark.integration

ROWS = 200_000
"""Enough that reading the consumer's rows costs more than probing for each key: a plan that
scans still shows."""
KEYS = 40


def _rows_read(plan: dict[str, Any]) -> int:
    """Rows the plan's scans produced or threw away, summed over every node."""
    node = plan
    own = 0
    if "Scan" in node.get("Node Type", ""):
        own = int(node.get("Actual Rows", 0)) * int(node.get("Actual Loops", 1)) + int(
            node.get("Rows Removed by Filter", 0)
        )
    return own + sum(_rows_read(child) for child in node.get("Plans", []))


async def _explained(conn: asyncpg.Connection, sql: str, args: list[object]) -> dict[str, Any]:
    """The executed plan of ``sql``, its changes rolled back."""
    transaction = conn.transaction()
    await transaction.start()
    try:
        [row] = await conn.fetch("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, *args)
    finally:
        await transaction.rollback()
    plan: dict[str, Any] = json.loads(row[0])[0]["Plan"]
    return plan


async def test_the_dedup_statements_probe_the_index(database_url: str) -> None:
    insert = (
        "INSERT INTO core.event_handled (consumer, dedup_key, event_id, outcome, "
        "source_partition, source_offset, slot) SELECT 'rule-candidates', "
        "core.dedup_key('k' || g), gen_random_uuid(), 'applied', 0, g, 0 "
        "FROM generate_series($1::int, $2::int) AS g"
    )
    async with session(database_url) as admin:
        # No statistics yet, as in a slot that filled faster than autovacuum came by (a fresh
        # database, a slot just emptied by a rotation): the planner knows nothing of the keys.
        await admin.execute(insert, 1, ROWS)
    keys = [f"k{i}" for i in range(1, KEYS + 1)]
    extra: list[object] = [[uuid.uuid4() for _ in keys], [0] * KEYS, list(range(KEYS))]
    read: dict[tuple[str, str], int] = {}
    async with session(database_url, PROJECTOR) as conn:
        for mode in ("force_custom_plan", "force_generic_plan"):
            await conn.execute(f"SET plan_cache_mode = {mode}")
            for statement in ("claim_keys", "mark_stale", "forget"):
                more = extra if statement == "claim_keys" else []
                args = ["rule-candidates", dedup_keys(keys), *more]
                for _ in range(6):  # past the plan cache's five custom plans
                    read[(mode, statement)] = _rows_read(
                        await _explained(conn, ENGINE_SQL[statement], args)
                    )
    assert all(n <= 10 * KEYS for n in read.values()), read
