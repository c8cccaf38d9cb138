"""The dedup record's compact keys (migration ``compact_dedup_keys``, spectral/engine/keys.py):
the database stores and reads keys exactly as the engine does, and a database that holds dedup
rows is converted with nothing lost: every key is still a duplicate, with its outcome, and reads
back as it was written."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spectral.db.migrate import migrate
from spectral.devstack import Endpoints
from spectral.engine.keys import dedup_key
from tests.integration.maintenance.support import claim
from tests.support import empty_database, migrations_before
from tests.unit.engine.test_keys import any_key

pytestmark = pytest.mark.integration

MIGRATION = "_compact_dedup_keys.sql"


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(any_key, min_size=1, max_size=40))
def test_the_database_stores_and_reads_keys_as_the_engine_does(
    database_url: str, keys: list[str]
) -> None:
    async def check() -> None:
        conn = await asyncpg.connect(database_url)
        try:
            rows = await conn.fetch(
                "SELECT core.dedup_key(k) AS stored, core.dedup_key_text(s) AS text"
                " FROM unnest($1::text[], $2::bytea[]) AS t (k, s)",
                keys,
                [dedup_key(k) for k in keys],
            )
        finally:
            await conn.close()
        assert [r["stored"] for r in rows] == [dedup_key(k) for k in keys]
        assert [r["text"] for r in rows] == keys

    asyncio.run(check())


@pytest.fixture
async def unmigrated(stack: Endpoints) -> AsyncIterator[str]:
    async with empty_database(stack.database_url, "spectral_keys_") as url:
        yield url


async def test_dedup_rows_survive_the_conversion_to_compact_keys(
    unmigrated: str, tmp_path: Path
) -> None:
    url = unmigrated
    await migrate(url, migrations_before(MIGRATION, tmp_path))
    snapshots = [f"{uuid.uuid4()}:{uuid.uuid4().hex}" for _ in range(300)]
    others = ["k-é", "K-É", "work-1:2", snapshots[0].upper(), "old-" + "x" * 500]
    keys = snapshots + others
    conn = await asyncpg.connect(url)
    try:
        # Both slots of the ring hold keys (generation 1 ended in slot 0, 2 current in slot 1),
        # some stale, of two consumers.
        await conn.execute(
            "UPDATE core.dedup_generations SET ended_at = now() WHERE generation = 1;"
            "INSERT INTO core.dedup_generations (generation, slot, started_at)"
            " VALUES (2, 1, now())"
        )
        await conn.execute(
            "INSERT INTO core.event_handled (consumer, idempotency_key, event_id, outcome,"
            " source_partition, source_offset, slot)"
            " SELECT c, k, gen_random_uuid(), CASE WHEN i % 3 = 0 THEN 'stale' ELSE 'applied' END,"
            " i % 6, i, i % 2"
            " FROM unnest($1::text[]) WITH ORDINALITY AS t (k, i),"
            " unnest(ARRAY['rule-candidates', 'work-executor']) AS c",
            keys,
        )
        before = await conn.fetch(
            "SELECT consumer, idempotency_key, event_id, outcome, source_partition,"
            " source_offset, handled_at, slot FROM core.event_handled"
            ' ORDER BY consumer, idempotency_key COLLATE "C"'
        )
    finally:
        await conn.close()

    report = await migrate(url)
    assert [m for m in report.applied if m.endswith(MIGRATION.removesuffix(".sql"))]

    conn = await asyncpg.connect(url)
    try:
        after = await conn.fetch(
            "SELECT consumer, idempotency_key, event_id, outcome, source_partition,"
            " source_offset, handled_at, slot FROM core.event_handled_keys"
            ' ORDER BY consumer, idempotency_key COLLATE "C"'
        )
        compact = await conn.fetchval(
            "SELECT count(*) FROM core.event_handled WHERE length(dedup_key) = 33"
        )
    finally:
        await conn.close()
    assert [dict(r) for r in after] == [dict(r) for r in before]
    assert compact == 2 * len(snapshots)
    # Every old key is still a duplicate for its consumer, in either slot; a new key is new.
    new = f"{uuid.uuid4()}:{uuid.uuid4().hex}"
    assert await claim(url, [*keys, new]) == {new}
    assert await claim(url, [*keys, "fresh"], "work-executor", "spectral_executor") == {"fresh"}
