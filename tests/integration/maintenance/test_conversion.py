"""The bounded-state migration converts tables that hold data, in place: every dedup row is still
a duplicate afterwards, every outbox row is still there (published or not) and is relayed in
order, ids keep growing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from spectral.db.migrate import migrate
from spectral.devstack import Endpoints
from spectral.outbox.relay import OutboxRelay, RelayMetrics, RelayOptions
from spectral.settings import Settings
from tests.integration.maintenance.support import claim
from tests.integration.outbox.relay.support import (
    EVENT_TYPE,
    by_key,
    enqueue_numbered,
    key_id,
    read_topic,
)
from tests.support import empty_database, migrations_before

pytestmark = pytest.mark.integration

MIGRATION = "_bounded_state.sql"


@pytest.fixture
async def unmigrated(stack: Endpoints) -> AsyncIterator[str]:
    async with empty_database(stack.database_url, "spectral_conv_") as url:
        yield url


async def test_existing_dedup_rows_and_outbox_rows_survive_the_conversion(
    unmigrated: str, tmp_path: Path, settings: Settings, kafka_bootstrap: str, topic_prefix: str
) -> None:
    url = unmigrated
    await migrate(url, migrations_before(MIGRATION, tmp_path))

    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "INSERT INTO core.event_handled (consumer, idempotency_key, event_id, outcome, "
            "source_partition, source_offset) "
            "SELECT 'rule-candidates', 'old-' || g, gen_random_uuid(), 'applied', 0, g "
            "FROM generate_series(1, 500) AS g"
        )
        await enqueue_numbered(url, [(key_id(k), s) for k in range(3) for s in range(1, 4)])
        await conn.execute("UPDATE core.outbox SET published_at = now() WHERE id <= 4")
        last_id = await conn.fetchval("SELECT max(id) FROM core.outbox")
    finally:
        await conn.close()

    report = await migrate(url)
    assert [m for m in report.applied if m.endswith(MIGRATION.removesuffix(".sql"))]

    # Every old key is still a duplicate; a new key is new.
    assert await claim(url, ["old-1", "old-250", "old-500", "new"]) == {"new"}
    conn = await asyncpg.connect(url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM core.event_handled_0") == 501
        rows = await conn.fetch("SELECT id, slot, published_at FROM core.outbox ORDER BY id")
        assert len(rows) == 9
        assert {r["slot"] for r in rows} == {0}
        assert sum(r["published_at"] is not None for r in rows) == 4
    finally:
        await conn.close()
    [new_id] = await enqueue_numbered(url, [(key_id(0), 4)])
    assert new_id > last_id

    relay = OutboxRelay(
        settings,
        kafka_bootstrap=kafka_bootstrap,
        database_url=url,
        metrics=RelayMetrics(CollectorRegistry()),
        options=RelayOptions(once=True),
    )
    assert (await relay.run()).published == 6
    records = await read_topic(kafka_bootstrap, topic_prefix + EVENT_TYPE)
    # Rows 1-4 (key 0's #1-#3, key 1's #1) had been published before the conversion.
    assert by_key(records) == {
        str(key_id(0)): [4],
        str(key_id(1)): [2, 3],
        str(key_id(2)): [1, 2, 3],
    }
