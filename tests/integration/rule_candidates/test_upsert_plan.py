"""The projection's upsert reads only the clusters of its batch, however many the projection holds.

Its ``prior`` CTE (the stored snapshot of each cluster of the batch) could be planned as a hash
join over a sequential scan of the whole projection: cheap at a few thousand clusters, a read of
every row for every batch at hundreds of thousands. With 200,000 clusters stored, batches of 20
and of 1,000 clusters (known and new), custom and generic plans alike (the engine's session keeps
the statement prepared), the statement reads each cluster of its batch by the primary key.
"""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from tests.integration.rule_candidates.helpers import connected, deliveries, new_handler, snapshot

pytestmark = pytest.mark.integration

STORED = 200_000
PROJECTOR = "spectral_projector"


async def _stored_clusters(database_url: str, *, analyze: bool = True) -> list[uuid.UUID]:
    """STORED clusters written directly (the upsert's own work is not what is measured here),
    then analysed, as autovacuum would have done by then (unless not ``analyze``)."""
    async with connected(database_url, None) as admin:
        await admin.execute(
            "INSERT INTO platform.rule_candidates_pending (cluster_id, snapshot_hash, rule_id, "
            "workspace_id, severity, failure_count, first_observed_at, last_observed_at, "
            "evidence_bundle, ordered_at) "
            "SELECT gen_random_uuid(), md5(g::text), gen_random_uuid(), gen_random_uuid(), "
            "'low', 1, '2026-01-01', '2026-01-01', '[]', '2026-01-01' "
            "FROM generate_series(1, $1::int) AS g",
            STORED,
        )
        if analyze:
            await admin.execute("ANALYZE platform.rule_candidates_pending")
        rows = await admin.fetch(
            "SELECT cluster_id FROM platform.rule_candidates_pending LIMIT 1000"
        )
    return [r[0] for r in rows]


async def _rows_read(database_url: str) -> int:
    """Rows read from the projection so far by sequential and index scans (every session's
    statistics sent first)."""
    async with connected(database_url, None) as admin:
        await admin.execute("SELECT pg_stat_force_next_flush()")
        value = await admin.fetchval(
            "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) "
            "FROM pg_stat_user_tables "
            "WHERE schemaname = 'platform' AND relname = 'rule_candidates_pending'"
        )
    return int(value)


async def _flushed(conn: asyncpg.Connection) -> None:
    await conn.execute("RESET ROLE")
    await conn.execute("SELECT pg_stat_force_next_flush()")
    await conn.execute(f"SET ROLE {PROJECTOR}")


@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
async def test_the_upsert_reads_only_its_batch_with_many_clusters_stored(
    database_url: str, mode: str
) -> None:
    known = await _stored_clusters(database_url)
    handler = new_handler()
    async with connected(database_url, PROJECTOR) as conn:
        await conn.execute(f"SET plan_cache_mode = {mode}")
        for round_, size in enumerate((20, 20, 20, 20, 20, 20, 1000)):
            # Known clusters get a newer snapshot; a few new ones are inserted.
            clusters = known[round_ * 20 : round_ * 20 + size] if size == 20 else known
            batch = deliveries(
                *(snapshot(c, minutes=round_ + 1) for c in clusters),
                *(snapshot(uuid.uuid4()) for _ in range(5)),
            )
            await _flushed(conn)
            before = await _rows_read(database_url)
            async with conn.transaction():
                result = await handler.apply(conn, batch)
            await _flushed(conn)
            read = await _rows_read(database_url) - before
            assert not result.stale
            assert not result.rejected
            # Each cluster of the batch is read a few times (its prior snapshot, the conflict
            # check, the update); a scan of the projection would read all 200,000.
            assert read <= 10 * len(batch), (mode, size, read)


async def test_the_upsert_planned_on_a_few_clusters_reads_only_its_batch_once_grown(
    database_url: str,
) -> None:
    """The engine's session keeps the upsert's plan: a plan made while the projection held the
    first batches' few clusters must not scan it once it has grown (a generic plan made then
    hash-joined the batch with a sequential scan of the whole projection, for every batch)."""
    handler = new_handler()
    async with connected(database_url, PROJECTOR) as conn:
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        for _ in range(6):  # planned on a projection of a few clusters
            async with conn.transaction():
                await handler.apply(conn, deliveries(*(snapshot(uuid.uuid4()) for _ in range(3))))
        known = await _stored_clusters(database_url, analyze=False)
        for round_ in range(5):
            clusters = known[round_ * 20 : round_ * 20 + 20]
            batch = deliveries(*(snapshot(c, minutes=round_ + 1) for c in clusters))
            await _flushed(conn)
            before = await _rows_read(database_url)
            async with conn.transaction():
                result = await handler.apply(conn, batch)
            await _flushed(conn)
            read = await _rows_read(database_url) - before
            assert not result.stale
            assert read <= 10 * len(batch), (round_, read)
