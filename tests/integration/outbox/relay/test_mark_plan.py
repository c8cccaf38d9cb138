"""The relay's mark (core.outbox_mark_published) keeps one plan per session: that plan must probe
each row's primary key whatever the slot held when it was made. A plan made on an empty slot that
reached a row through the partial index of unpublished rows by key would read the whole backlog
of the slot for every row it marks."""

from __future__ import annotations

from datetime import timedelta

import asyncpg
import pytest

from spectral.outbox.relay.repository import _SQL, RELAY_ROLE, RelayRepository
from spectral.outbox.relay.shards import SHARD_COUNT
from tests.integration.maintenance.support import clock_went_back, session
from tests.support import explained, plan_rows_read

pytestmark = pytest.mark.integration

BACKLOG = 20_000
"""Unpublished rows the slot gets after the plan was made (no statistics taken)."""
BATCH = 20
BATCHES = 25


async def _write(database_url: str, rows: int, first: int) -> None:
    async with session(database_url) as admin:
        await admin.execute(
            "INSERT INTO core.outbox (event_type, record_key, idempotency_key, envelope) "
            "SELECT 't', 'k' || (g % 997), 'i' || g, '\\x00'::bytea "
            "FROM generate_series($1::int, $2::int) AS g",
            first,
            first + rows - 1,
        )


async def _rows_read(database_url: str, conn: asyncpg.Connection) -> tuple[int, int]:
    """Rows sequential scans read, and index entries read, from the outbox's slots so far."""
    await conn.execute("SELECT pg_stat_force_next_flush()")
    async with session(database_url) as admin:
        row = await admin.fetchrow(
            "SELECT coalesce(sum(t.seq_tup_read), 0) AS scanned, "
            "(SELECT coalesce(sum(i.idx_tup_read), 0) FROM pg_stat_user_indexes AS i "
            " WHERE i.schemaname = 'core' AND i.relname LIKE 'outbox\\__') AS probed "
            "FROM pg_stat_user_tables AS t "
            "WHERE t.schemaname = 'core' AND t.relname LIKE 'outbox\\__'"
        )
    assert row is not None
    return int(row["scanned"]), int(row["probed"])


async def test_marks_in_a_slot_grown_from_empty_probe_the_primary_key(database_url: str) -> None:
    repo = await RelayRepository.open(database_url, role=RELAY_ROLE)
    conn = repo._conn
    try:
        await repo.try_lock(list(range(SHARD_COUNT)), SHARD_COUNT)
        await _write(database_url, BATCH * 3, 0)
        for _ in range(3):  # the plan is made (and kept) on a slot of a few rows
            await repo.mark_published(await repo.fetch_batch(list(range(SHARD_COUNT)), BATCH))
        await _write(database_url, BACKLOG, BATCH * 3)
        rows = await repo.fetch_batch(list(range(SHARD_COUNT)), BATCH * BATCHES)
        await conn.execute("RESET ROLE")
        _, before = await _rows_read(database_url, conn)
        await conn.execute(f"SET ROLE {RELAY_ROLE}")
        for at in range(0, len(rows), BATCH):
            await repo.mark_published(rows[at : at + BATCH])
        await conn.execute("RESET ROLE")
        read = (await _rows_read(database_url, conn))[1] - before
    finally:
        await repo.close()
    # A probe per row reads one entry; a scan of the slot's unpublished rows per row would read
    # BATCH x BATCHES x BACKLOG (10 million).
    assert read <= 10 * BATCH * BATCHES, read
    async with session(database_url) as admin:
        published = await admin.fetchval(
            "SELECT count(*) FROM core.outbox WHERE published_at IS NOT NULL"
        )
    assert published == BATCH * (3 + BATCHES)


async def _fetch_reads(database_url: str) -> tuple[int, int, int]:
    """One fetch of BATCH rows of every shard by a relay session: (rows returned, rows
    sequential scans read, index entries read)."""
    repo = await RelayRepository.open(database_url, role=RELAY_ROLE)
    conn = repo._conn
    try:
        await repo.try_lock(list(range(SHARD_COUNT)), SHARD_COUNT)
        await conn.execute("RESET ROLE")
        scanned, probed = await _rows_read(database_url, conn)
        await conn.execute(f"SET ROLE {RELAY_ROLE}")
        rows = await repo.fetch_batch(list(range(SHARD_COUNT)), BATCH)
        await conn.execute("RESET ROLE")
        after_scanned, after_probed = await _rows_read(database_url, conn)
    finally:
        await repo.close()
    return len(rows), after_scanned - scanned, after_probed - probed


DELAYED = 5


async def _write_delayed(database_url: str) -> None:
    """DELAYED rows delayed an hour, keys k1..k5 (which _write's rows share)."""
    async with session(database_url) as admin:
        await admin.execute(
            "INSERT INTO core.outbox (event_type, record_key, idempotency_key, envelope, "
            "available_at) SELECT 't', 'k' || g, 'd' || g, '\\x00'::bytea, "
            "now() + interval '1 hour' FROM generate_series(1, $1::int) AS g",
            DELAYED,
        )


@pytest.mark.parametrize("analysed", [False, True])
async def test_a_fetch_reads_the_delayed_rows_alone_whatever_waits_beside_them(
    database_url: str, analysed: bool
) -> None:
    """Each fetch reads the delayed rows of every held shard (a key's later rows wait behind
    them): through an index that holds those rows only, not the backlog of rows written without
    a delay — with statistics or without (a slot not yet analysed)."""
    await _write(database_url, BACKLOG, 0)
    await _write_delayed(database_url)
    if analysed:
        async with session(database_url) as admin:
            await admin.execute("ANALYZE core.outbox_0")
    returned, scanned, probed = await _fetch_reads(database_url)
    # key k1..k5 have a delayed row: their earlier rows go, their later ones wait
    assert returned == BATCH
    assert scanned == 0, scanned
    # the batch's rows (and the few it skips) from the queue, the delayed rows from theirs
    assert probed <= 3 * BATCH + DELAYED, probed


async def test_a_fetch_reads_the_delayed_rows_alone_after_the_clock_went_back(
    database_url: str,
) -> None:
    """Guarantee (migration 0055, fetch_batch): each fetch reads the delayed rows through the
    index that holds them alone, not the backlog, "statistics or not" — and rows written
    without a delay go out whatever the clock did since their write.

    After the database's clock stepped back (an NTP correction: here an hour, over a slot
    whose rows were written in the hour before), the slot's statistics, taken since, show its
    rows' available_at in the future. The fetch's read of the delayed rows names
    `available_at > now()` and the predicate `available_at > created_at` (costed as a third):
    the planner expected a third of the slot there, and read the delayed rows by scanning the
    whole slot — every fetch, until the clock had caught up. The rows were published (0055's
    fix), but draining a backlog of N rows read N / BATCH x N rows. Minimal reproduction:
    20,000 rows written without a delay and 5 delayed an hour, every row's created_at and
    available_at an hour later (the clock went back an hour), ANALYZE: one fetch of 20 rows
    sequentially read 20,005 rows. (With 10 % of the slot written in the hour before the step
    the index is still used; from about 25 % it is not.) Before 0055 the same situation read the
    whole backlog too and published nothing. The relay's session now plans with sequential scans
    off (queue_reads): the delayed rows are read through their index."""
    await _write(database_url, BACKLOG, 0)
    await _write_delayed(database_url)
    await clock_went_back(database_url, timedelta(hours=1))
    async with session(database_url) as admin:
        await admin.execute("VACUUM ANALYZE core.outbox_0")
    returned, scanned, probed = await _fetch_reads(database_url)
    assert returned == BATCH  # written without a delay: publishable whatever the clock says
    assert scanned == 0, scanned
    assert probed <= 3 * BATCH + DELAYED, probed


WAITING_KEYS = 1_000
"""Keys with a row delayed an hour and a row queued behind it (the executor's retries during a
downstream outage, each item its own key, each with its next step written)."""


@pytest.mark.parametrize("analysed", [False, True])
async def test_rows_behind_delayed_rows_cost_a_bounded_read_each(
    database_url: str, analysed: bool
) -> None:
    """Guarantee: a fetch, and the relay's backlog reading (outbox_stats), cost a bounded read
    per row they pass, however many keys have a delayed row.

    A row of a key with a delayed row is compared with that key's first delayed id. 0055 read
    the delayed rows once (delayed_keys) and matched them by a subquery per row (the fetch) or a
    join (the stats) over the list: each row of such a key read the list, a nested loop over it.
    A fetch reads, in id order, every row queued behind a delayed one before it finds a batch: a
    fetch of 20 rows with 10,000 keys waiting behind delayed rows took ~5.7 s of the server's
    CPU, every fetch until their time came. The rows counted here are every row every scan of
    the plan produced or threw away."""
    async with session(database_url) as admin:
        await admin.execute(
            "INSERT INTO core.outbox (event_type, record_key, idempotency_key, envelope, "
            "available_at) SELECT 't', 'w' || g, 'd' || g, '\\x00'::bytea, "
            "now() + interval '1 hour' FROM generate_series(1, $1::int) AS g",
            WAITING_KEYS,
        )
        await admin.execute(
            "INSERT INTO core.outbox (event_type, record_key, idempotency_key, envelope) "
            "SELECT 't', 'w' || g, 'b' || g, '\\x00'::bytea "
            "FROM generate_series(1, $1::int) AS g",
            WAITING_KEYS,
        )
    await _write(database_url, 2 * WAITING_KEYS, 0)
    if analysed:
        async with session(database_url) as admin:
            await admin.execute("ANALYZE core.outbox_0")
    rows = 4 * WAITING_KEYS
    repo = await RelayRepository.open(database_url, role=RELAY_ROLE)
    try:
        fetch = await explained(repo._conn, _SQL["fetch_batch"], [SHARD_COUNT, None, BATCH, [], []])
        stats = await explained(repo._conn, _SQL["outbox_stats"], [])
    finally:
        await repo.close()
    read = {"fetch": plan_rows_read(fetch), "stats": plan_rows_read(stats)}
    # A few reads per row; a read of the waiting keys per row: WAITING_KEYS x WAITING_KEYS.
    assert all(n <= 4 * rows for n in read.values()), read
