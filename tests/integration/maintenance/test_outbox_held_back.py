"""What maintenance reads to decide which unpublished rows of an ended outbox generation no relay
can publish within the margin (core.outbox_held_back): "is an earlier row of this key delayed
beyond it?" costs a bounded read per row, never a read of every delayed row per row."""

from __future__ import annotations

from datetime import timedelta

import pytest

from spectral.outbox.relay.repository import RELAY_ROLE, RelayRepository
from spectral.outbox.relay.shards import SHARD_COUNT
from spectral.settings import Settings
from tests.integration.maintenance.support import clock_went_back, run_maintenance, session

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
    second column, so each row's probe read the whole range of rows delayed beyond the margin.
    The check cost unpublished rows x delayed rows. Minimal reproduction: 40,000 rows written
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


async def test_a_delayed_row_moved_while_in_flight_is_marked_where_it_went(
    settings: Settings, database_url: str
) -> None:
    """Guarantee: a row a relay sent is marked published, and not published again (here: the
    row maintenance moved to another slot while the relay had it in flight).

    Maintenance moves only rows no relay can have in flight — "a relay fetches a row only once
    its time has come" (docs/explanation/bounded-state.md; evacuate_delayed).

    That holds while the database's clock only goes forward. A delayed row whose time has come
    is fetched and sent; the clock then steps back by more than the margin (an NTP correction,
    the situation migration 0055 addresses for rows written without a delay): maintenance finds
    the row delayed beyond the margin again and moves it, with the rows of its key behind it,
    to the current slot, while the relay has it in flight. The relay marked it by (id, slot), in
    its old slot: the mark found nothing, the generation was recorded fully published, and the
    row was published again once the clock caught up (a duplicate; a row behind it in flight was
    moved and republished as well). Minimal reproduction: a row delayed by a millisecond in
    generation 1, its time passed, the generation ended; a relay fetches it; every row's times
    an hour later (the clock went back an hour); a maintenance pass moves it; the relay's mark
    left it unpublished. Predates 0055 (before, any row was moved so). The mark now looks for
    the rows it did not find in their slot in the others (core.outbox_mark_published, migration
    outbox_mark_finds_moved_rows)."""
    async with session(database_url) as admin:
        await admin.execute(
            "INSERT INTO core.outbox (event_type, record_key, idempotency_key, envelope, "
            "available_at) VALUES ('t', 'k1', 'i1', '\\x00'::bytea, "
            "statement_timestamp() + interval '1 millisecond')"
        )
        await admin.execute("SELECT pg_sleep(0.01)")  # its time comes
    await run_maintenance(settings, outbox_retention=HOUR)  # generation 1 ends
    repo = await RelayRepository.open(database_url, role=RELAY_ROLE)
    try:
        await repo.try_lock(list(range(SHARD_COUNT)), SHARD_COUNT)
        in_flight = await repo.fetch_batch(list(range(SHARD_COUNT)), 10)  # sent, acks awaited
        assert [r.record_key for r in in_flight] == ["k1"]
        await clock_went_back(database_url, HOUR)
        report = await run_maintenance(settings, outbox_retention=HOUR)
        assert report.outbox.moved_delayed_rows == 1  # the clock says: delayed beyond the margin
        await repo.mark_published(in_flight)  # acknowledged: marked
    finally:
        await repo.close()
    async with session(database_url) as admin:
        unpublished = await admin.fetchval(
            "SELECT count(*) FROM core.outbox WHERE published_at IS NULL"
        )
    assert unpublished == 0
