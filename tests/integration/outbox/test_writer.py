"""spectral.outbox.writer.enqueue: one set-based INSERT in the caller's transaction."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from spectral.outbox.writer import OutboxItem, enqueue
from tests.events import decode, encode
from tests.integration.outbox.relay.support import EVENT_TYPE, key_id, numbered

pytestmark = pytest.mark.integration


async def test_rows_hold_the_exact_bytes_in_input_order(database_url: str) -> None:
    items = [OutboxItem(numbered(key_id(i % 3), i + 1), str(key_id(i % 3))) for i in range(30)]
    conn = await asyncpg.connect(database_url)
    try:
        async with conn.transaction():
            ids = await enqueue(conn, items)
        rows = await conn.fetch(
            "SELECT id, event_type, record_key, idempotency_key, envelope, available_at, "
            "created_at, published_at FROM core.outbox ORDER BY id"
        )
    finally:
        await conn.close()
    assert ids == sorted(ids)
    assert ids == [r["id"] for r in rows]
    for item, row in zip(items, rows, strict=True):
        assert bytes(row["envelope"]) == encode(item.envelope)
        assert decode(bytes(row["envelope"])) == item.envelope
        assert row["event_type"] == EVENT_TYPE
        assert row["record_key"] == item.key
        assert row["idempotency_key"] == item.envelope.idempotency_key
        # available now (the transaction's start); written by the statement, a moment later
        assert row["available_at"] <= row["created_at"]
        assert row["published_at"] is None


async def test_a_rolled_back_transaction_leaves_no_row(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        transaction = conn.transaction()
        await transaction.start()
        await enqueue(conn, [OutboxItem(numbered(key_id(1), 1), str(key_id(1)))])
        await transaction.rollback()  # the state change failed
        assert await conn.fetchval("SELECT count(*) FROM core.outbox") == 0
        assert await enqueue(conn, []) == []
    finally:
        await conn.close()


async def test_available_at_delays_and_must_be_aware(database_url: str) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    conn = await asyncpg.connect(database_url)
    try:
        await enqueue(conn, [OutboxItem(numbered(key_id(1), 1), "k", later)])
        assert await conn.fetchval("SELECT available_at FROM core.outbox") == later
        with pytest.raises(ValueError, match="timezone-aware"):
            await enqueue(conn, [OutboxItem(numbered(key_id(1), 2), "k", datetime(2026, 1, 1))])  # noqa: DTZ001
    finally:
        await conn.close()


async def test_the_producer_role_may_enqueue(database_url: str) -> None:
    conn = await asyncpg.connect(database_url, server_settings={"role": "spectral_producer"})
    try:
        assert len(await enqueue(conn, [OutboxItem(numbered(key_id(1), 1), "k")])) == 1
    finally:
        await conn.close()
