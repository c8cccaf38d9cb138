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
from tests.support import explained, plan_rows_read

pytestmark = pytest.mark.integration

HOUR = timedelta(hours=1)
BACKLOG = 4_000
"""Rows written without a delay that the relays have not published yet (relays behind)."""
DELAYED = 1_000
"""Rows delayed an hour (the executor's retries during a downstream outage), each its own key,
each with a row of its key queued behind it."""
HELD_BACK_SQL = "SELECT count(*) FROM core.outbox_held_back(0::smallint, interval '1 minute')"


async def test_checking_an_ended_generation_reads_the_delayed_rows_once_not_per_row(
    settings: Settings, database_url: str
) -> None:
    """Guarantee: maintenance's check of an ended generation (core.outbox_held_back, run by
    every pass while the generation waits for the relays, and again by the move) costs a
    bounded read per unpublished row, with statistics or without.

    Migration 0055 dropped outbox_unpublished_by_key (record_key, id), which the EXISTS of
    core.outbox_held_back ("an earlier unpublished row of this key delayed beyond the margin")
    probed per row, and left it outbox_delayed (available_at, record_key): record_key is its
    second column, so each row's probe read the whole range of rows delayed beyond the margin
    (40,000 + 10,000 rows: ~2.8 million index pages, ~11 s a pass). 0055's second version read
    the delayed rows once into each key's first delayed id and joined the slot's rows with them
    by key; on a slot without statistics (filled faster than autovacuum came by) the planner
    expected a handful of rows and joined by a nested loop, reading every delayed key per row:
    the same 50,000 rows took ~29 s of CPU a pass, 500 million rows compared. The rows counted
    here are every row every scan of the plan produced or threw away."""
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
        await admin.execute(
            "INSERT INTO core.outbox (event_type, record_key, idempotency_key, envelope) "
            "SELECT 't', 'd' || g, 'b' || g, '\\x00'::bytea "
            "FROM generate_series(1, $1::int) AS g",
            DELAYED,
        )
    await run_maintenance(settings, outbox_retention=HOUR)  # generation 1 ends
    read = {}
    async with session(database_url) as admin:
        for analysed in (False, True):
            if analysed:
                await admin.execute("ANALYZE core.outbox")
            plan = await explained(admin, HELD_BACK_SQL, [])
            read[analysed] = plan_rows_read(plan)
            # each delayed row and the row behind it; the backlog is due
            assert await admin.fetchval(HELD_BACK_SQL) == 2 * DELAYED
    # A few reads per row (the slot's unpublished rows, the delayed rows once); a read of the
    # delayed keys per row: (BACKLOG + 2 x DELAYED) x DELAYED.
    assert all(n <= 4 * (BACKLOG + 2 * DELAYED) for n in read.values()), read
    report = await run_maintenance(settings, outbox_retention=HOUR)
    assert report.outbox.waiting_for_relay == [1]  # the backlog is due: left to the relays


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
