"""What maintenance reads to decide which unpublished rows of an ended outbox generation no relay
can publish within the margin (core.outbox_held_back): "is an earlier row of this key delayed
beyond it?" costs a bounded read per row, never a read of every delayed row per row."""

from __future__ import annotations

from datetime import timedelta

import pytest

from spectral.settings import Settings
from tests.integration.maintenance.support import run_maintenance, session

pytestmark = pytest.mark.integration

HOUR = timedelta(hours=1)
BACKLOG = 40_000
"""Rows written without a delay that the relays have not published yet (relays behind)."""
DELAYED = 10_000
"""Rows delayed an hour (the executor's retries during a downstream outage), each its own key."""


async def _index_blocks(database_url: str) -> int:
    """Index pages read (from the buffer cache or the disk) in the outbox's slots so far."""
    async with session(database_url) as admin:
        await admin.execute("SELECT pg_stat_force_next_flush()")
        return int(
            await admin.fetchval(
                "SELECT coalesce(sum(idx_blks_hit + coalesce(idx_blks_read, 0)), 0) "
                "FROM pg_statio_user_indexes "
                "WHERE schemaname = 'core' AND relname LIKE 'outbox\\__'"
            )
        )


async def test_checking_an_ended_generation_reads_the_delayed_rows_once_not_per_row(
    settings: Settings, database_url: str
) -> None:
    """Guarantee: maintenance's check of an ended generation (core.outbox_held_back, run by
    every pass while the generation waits for the relays, and again by the move) costs a
    bounded read per unpublished row.

    Migration 0055 dropped outbox_unpublished_by_key (record_key, id), which the EXISTS of
    core.outbox_held_back ("an earlier unpublished row of this key delayed beyond the margin")
    probed per row, and left it outbox_delayed (available_at, record_key): record_key is its
    second column, so each row's probe reads the whole range of rows delayed beyond the margin.
    The check costs unpublished rows x delayed rows. Minimal reproduction: 40,000 rows written
    without a delay and 10,000 rows delayed an hour in generation 1, the generation ended, one
    maintenance pass: ~2.8 million index pages read and ~11 s (at 20,000 + 5,000: 780,000 pages,
    2.8 s — it grows with the product), where the schema of migration 0054 reads ~320,000
    pages in ~0.5 s (6.4 per row). A regression of 0055's first version: the function now
    reads the delayed rows once, into each key's first delayed id, and matches the slot's rows
    with them by key."""
    async with session(database_url) as admin:
        await admin.execute(
            "INSERT INTO core.outbox (event_type, record_key, idempotency_key, envelope) "
            "SELECT 't', 'k' || (g % 997), 'i' || g, '\\x00'::bytea "
            "FROM generate_series(1, $1::int) AS g",
            BACKLOG,
        )
        await admin.execute(
            "INSERT INTO core.outbox (event_type, record_key, idempotency_key, envelope, "
            "available_at) SELECT 't', 'd' || g, 'd' || g, '\\x00'::bytea, "
            "now() + interval '1 hour' FROM generate_series(1, $1::int) AS g",
            DELAYED,
        )
    await run_maintenance(settings, outbox_retention=HOUR)  # generation 1 ends
    before = await _index_blocks(database_url)
    report = await run_maintenance(settings, outbox_retention=HOUR)
    read = await _index_blocks(database_url) - before
    assert report.outbox.waiting_for_relay == [1]  # the backlog is due: left to the relays
    # A bounded read per row: a few pages (the schema before 0055: 6.4 per row); a read of the
    # delayed rows per row reads BACKLOG x DELAYED / (entries per page).
    assert read <= 12 * (BACKLOG + DELAYED), read
