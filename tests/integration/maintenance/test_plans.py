"""The engine's dedup statements stay index probes under row-level security, with custom and
generic plans alike: a policy's quals once turned `idempotency_key = ANY($2)` into a scan of
every row of the consumer (150-280 ms a batch at 600,000 keys)."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from spectral.engine.keys import dedup_keys
from tests.integration.maintenance.support import ENGINE_SQL, PROJECTOR, session
from tests.support import explained, plan_rows_read

pytestmark = pytest.mark.integration

ROWS = 200_000
"""Enough that reading the consumer's rows costs more than probing for each key: a plan that
scans still shows."""
KEYS = 40


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
                    read[(mode, statement)] = plan_rows_read(
                        await explained(conn, ENGINE_SQL[statement], args)
                    )
    assert all(n <= 10 * KEYS for n in read.values()), read


GROWN = 150
"""Batches of GROWTH_KEYS that grow the slot from empty (3,000 keys: some 30 pages)."""
AFTER = 50
GROWTH_KEYS = 20
ANALYZED_AT = 3
"""The batch after which the slot's statistics are taken, as autovacuum would while it is small."""


async def _rows_scanned(database_url: str, conn: asyncpg.Connection) -> int:
    """Rows sequential scans read from the dedup record's partitions so far (``conn``'s
    included: its statistics are sent first)."""
    await conn.execute("RESET ROLE")
    await conn.execute("SELECT pg_stat_force_next_flush()")
    await conn.execute(f"SET ROLE {PROJECTOR}")  # sent when the session went idle before this
    async with session(database_url) as admin:
        return int(
            await admin.fetchval(
                "SELECT coalesce(sum(seq_tup_read), 0) FROM pg_stat_user_tables "
                "WHERE schemaname = 'core' AND relname LIKE 'event_handled\\__'"
            )
        )


async def _claim_batches(conn: asyncpg.Connection, first: int, batches: int) -> None:
    for batch in range(first, first + batches):
        keys = [f"{uuid.uuid4()}:{uuid.uuid4().hex}" for _ in range(GROWTH_KEYS)]
        held = await conn.fetchval(
            ENGINE_SQL["claim_keys"],
            "rule-candidates",
            dedup_keys(keys),
            [uuid.uuid4() for _ in keys],
            [0] * GROWTH_KEYS,
            list(range(batch * GROWTH_KEYS, (batch + 1) * GROWTH_KEYS)),
        )
        assert held == []  # every key new


async def test_claims_into_a_slot_growing_from_empty_probe_the_index(database_url: str) -> None:
    """The current slot grows from empty (a fresh database, a slot a rotation just emptied)
    while one session claims small batches, its plans generic (the plan cache at its most
    persistent), the slot's statistics taken while it was small: a plan made then must not keep
    scanning the slot once it is large (a plain-insert claim whose probe was planned on a slot of
    a few rows spent 1.4-1.8 ms per key at a steady 2,000 events/s). The claim's statement
    (core.dedup_claim, which the engine's core.dedup_claim_held calls) is planned with
    sequential and bitmap scans disabled, so whenever it is planned it probes the index."""
    async with session(database_url, PROJECTOR) as conn:
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        start = await _rows_scanned(database_url, conn)
        await _claim_batches(conn, 0, ANALYZED_AT)
        async with session(database_url) as admin:
            await admin.execute("ANALYZE core.event_handled_0, core.event_handled_1")
        await _claim_batches(conn, ANALYZED_AT, GROWN - ANALYZED_AT)
        grown = await _rows_scanned(database_url, conn)
        await _claim_batches(conn, GROWN, AFTER)
        end = await _rows_scanned(database_url, conn)
    # Scanning the slot for every key would read GROWTH_KEYS x (rows so far) per batch: 4.5
    # million rows while it grows, 3.5 million in the batches after.
    assert grown - start <= 1_000_000, grown - start
    assert end == grown, end - grown


async def test_marks_and_forgetting_probe_the_index_of_a_slot_grown_since_planned(
    database_url: str,
) -> None:
    """The stale marks and the forgetting (core.dedup_mark_stale, core.dedup_forget) keep their
    plans for the session: plans made while the slot held a few analysed rows must not scan it
    once it has grown (a plan made then with sequential scans allowed reads the whole slot for
    every key). EXPLAIN does not show a function's plans: the rows sequential scans read are
    counted instead."""
    insert = (
        "INSERT INTO core.event_handled (consumer, dedup_key, event_id, outcome, "
        "source_partition, source_offset, slot) SELECT 'rule-candidates', "
        "core.dedup_key('k' || g), gen_random_uuid(), 'applied', 0, g, 0 "
        "FROM generate_series($1::int, $2::int) AS g"
    )
    small, grown = 60, 20_000
    async with session(database_url) as admin:
        await admin.execute(insert, 1, small)
        await admin.execute("ANALYZE core.event_handled_0, core.event_handled_1")
    async with session(database_url, PROJECTOR) as conn:
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        for statement in ("mark_stale", "forget"):  # planned on the small slot
            keys = dedup_keys(["k1"] if statement == "mark_stale" else ["k2"])
            await conn.execute(ENGINE_SQL[statement], "rule-candidates", keys)
        async with session(database_url) as admin:
            await admin.execute(insert, small + 1, grown)
        start = await _rows_scanned(database_url, conn)
        for batch in range(10):
            for statement in ("mark_stale", "forget"):
                first = small + 1 + (2 * batch + (statement == "forget")) * GROWTH_KEYS
                keys = dedup_keys([f"k{i}" for i in range(first, first + GROWTH_KEYS)])
                await conn.execute(ENGINE_SQL[statement], "rule-candidates", keys)
        end = await _rows_scanned(database_url, conn)
    # Scanning the grown slot for every key would read 20 x 20,000 rows per statement.
    assert end - start <= 1_000, end - start
    async with session(database_url) as admin:
        outcomes = await admin.fetch(
            "SELECT outcome, count(*) AS n FROM core.event_handled GROUP BY outcome"
        )
    assert {r["outcome"]: r["n"] for r in outcomes} == {
        "applied": grown - 1 - 1 - 20 * GROWTH_KEYS,
        "stale": 1 + 10 * GROWTH_KEYS,
    }
