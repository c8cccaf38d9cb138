"""PostgreSQL itself keeps each role to what it needs on the dedup record and the outbox: a
consumer's role writes only its own consumers' dedup rows, writers only insert outbox rows, the
relay only marks them published, maintenance only moves and empties slots."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from spectral.outbox.writer import OutboxItem, enqueue
from tests.integration.maintenance.support import (
    EXECUTOR,
    PROJECTOR,
    claim,
    first_rotation,
    session,
)
from tests.integration.outbox.relay.support import key_id, numbered

pytestmark = pytest.mark.integration

OWN = {"spectral_projector": "rule-candidates", "spectral_executor": "work-executor"}
OTHER = {"spectral_projector": "work-executor", "spectral_executor": "rule-candidates"}
INSERT_HANDLED = (
    "INSERT INTO core.event_handled (consumer, dedup_key, event_id, outcome, "
    "source_partition, source_offset, slot) "
    "VALUES ($1, core.dedup_key($2), gen_random_uuid(), 'applied', 0, 0, 0)"
)


async def _handled(database_url: str, consumer: str, key: str) -> None:
    async with session(database_url) as admin:
        await admin.execute(INSERT_HANDLED, consumer, key)


@pytest.mark.parametrize("role", sorted(OWN))
async def test_a_consumer_role_cannot_record_keys_of_another_consumer(
    database_url: str, role: str
) -> None:
    assert await claim(database_url, ["mine"], OWN[role], role) == {"mine"}
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match="row-level security"):
        await claim(database_url, ["theirs"], OTHER[role], role)
    async with session(database_url, role) as conn:
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="row-level security"):
            await conn.execute(INSERT_HANDLED, OTHER[role], "theirs")


@pytest.mark.parametrize("role", sorted(OWN))
async def test_a_consumer_role_can_neither_see_nor_change_another_consumers_rows(
    database_url: str, role: str
) -> None:
    await _handled(database_url, OTHER[role], "theirs")
    async with session(database_url, role) as conn:
        where = "WHERE consumer = $1 AND dedup_key = core.dedup_key('theirs')"
        assert (
            await conn.fetchval(f"SELECT count(*) FROM core.event_handled {where}", OTHER[role])
            == 0
        )
        assert (
            await conn.execute(
                f"UPDATE core.event_handled SET outcome = 'stale' {where}", OTHER[role]
            )
            == "UPDATE 0"
        )
        assert await conn.execute(f"DELETE FROM core.event_handled {where}", OTHER[role]) == (
            "DELETE 0"
        )
    async with session(database_url) as admin:
        row = await admin.fetchrow(
            "SELECT outcome FROM core.event_handled_keys WHERE idempotency_key = 'theirs'"
        )
    assert row is not None
    assert row["outcome"] == "applied"


async def test_keys_compare_byte_by_byte_and_stay_each_consumers_own(database_url: str) -> None:
    """The dedup keys are compared bytewise (stored as bytes, the consumer COLLATE "C", for the
    claim's cost): keys that only a collation could order alike stay distinct, a replayed claim
    takes none of them again (each once, in either slot), and the other consumer's role neither
    sees nor claims them."""
    keys = ["k-é", "k-e\u0301", "K-É", "k-ß", "k-ss", "k-ǅ", "k-a\U0001f600", "k-a\ufffd"]
    async with session(database_url) as admin:
        collations = await admin.fetch(
            "SELECT attname, collname FROM pg_attribute JOIN pg_collation c"
            " ON c.oid = attcollation WHERE attrelid = 'core.event_handled'::regclass"
            " AND attname = 'consumer'"
        )
        stored_as = await admin.fetchval(
            "SELECT atttypid::regtype::text FROM pg_attribute"
            " WHERE attrelid = 'core.event_handled'::regclass AND attname = 'dedup_key'"
        )
    assert {r["attname"]: r["collname"] for r in collations} == {"consumer": "C"}
    assert stored_as == "bytea"
    assert await claim(database_url, keys) == set(keys)
    assert await claim(database_url, [*reversed(keys), keys[0]]) == set()
    repo, rotation = await first_rotation(database_url)
    try:
        await repo.rotate_dedup(rotation, timedelta(seconds=30))
    finally:
        await repo.close()
    assert await claim(database_url, keys) == set()  # in the previous slot now: still handled
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match="row-level security"):
        await claim(database_url, keys, OTHER[EXECUTOR], EXECUTOR)
    async with session(database_url, EXECUTOR) as conn:
        assert await conn.fetchval("SELECT count(*) FROM core.event_handled") == 0
    async with session(database_url, PROJECTOR) as conn:
        assert await conn.fetchval(
            "SELECT count(*) FROM core.event_handled_keys WHERE idempotency_key = ANY($1)", keys
        ) == len(keys)


@pytest.mark.parametrize("role", sorted(OWN))
@pytest.mark.parametrize("partition", ["core.event_handled_0", "core.event_handled_1"])
async def test_the_partitions_are_reached_only_through_the_table(
    database_url: str, role: str, partition: str
) -> None:
    async with session(database_url, role) as conn:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.fetchval(f"SELECT count(*) FROM {partition}")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute(
                INSERT_HANDLED.replace("core.event_handled", partition), OWN[role], "x"
            )


async def _outbox_row(database_url: str, *, published: bool = False) -> int:
    async with session(database_url) as admin, admin.transaction():
        [row_id] = await enqueue(admin, [OutboxItem(numbered(key_id(1), 1), str(key_id(1)))])
        if published:
            await admin.execute(
                "UPDATE core.outbox SET published_at = '2026-01-01T00:00:00Z' WHERE id = $1", row_id
            )
    return row_id


WRITERS = ["spectral_producer", "spectral_executor"]
COLUMNS = {
    "envelope": "'\\x00'::bytea",
    "record_key": "'other'",
    "idempotency_key": "'other'",
    "event_type": "'other'",
    "available_at": "now()",
    "published_at": "now()",
    "slot": "1",
}


@pytest.mark.parametrize("role", WRITERS)
@pytest.mark.parametrize(("column", "value"), sorted(COLUMNS.items()))
async def test_writers_cannot_change_any_column_of_an_outbox_row(
    database_url: str, role: str, column: str, value: str
) -> None:
    row_id = await _outbox_row(database_url)
    async with session(database_url, role) as conn:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute(f"UPDATE core.outbox SET {column} = {value} WHERE id = $1", row_id)


@pytest.mark.parametrize("role", WRITERS)
async def test_writers_insert_rows_but_cannot_set_their_bookkeeping_read_or_delete_them(
    database_url: str, role: str
) -> None:
    async with session(database_url, role) as conn:
        async with conn.transaction():
            ids = await enqueue(conn, [OutboxItem(numbered(key_id(2), 1), str(key_id(2)))])
        assert len(ids) == 1
        for column, value in (
            ("published_at", "now()"),
            ("slot", "1"),
            ("created_at", "now()"),
        ):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(
                    "INSERT INTO core.outbox (event_type, record_key, idempotency_key, envelope, "
                    f"{column}) VALUES ('t', 'k', 'i', '\\x00', {value})"
                )
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.fetch("SELECT envelope FROM core.outbox")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("DELETE FROM core.outbox")


async def test_the_relay_only_marks_unpublished_rows_published_now(database_url: str) -> None:
    fresh = await _outbox_row(database_url)
    old = await _outbox_row(database_url, published=True)
    async with session(database_url, "spectral_relay") as relay:
        for statement in (
            "UPDATE core.outbox SET published_at = NULL",
            "UPDATE core.outbox SET envelope = '\\x00'",
            "DELETE FROM core.outbox",
            (
                "INSERT INTO core.outbox (event_type, record_key, idempotency_key, envelope) "
                "VALUES ('t', 'k', 'i', '\\x00')"
            ),
        ):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await relay.execute(statement)
        marked = await relay.fetchval(
            "SELECT core.outbox_mark_published($1, $2)", [fresh, old], [0, 0]
        )
    assert marked == 1
    async with session(database_url) as admin:
        rows = await admin.fetch("SELECT id, published_at FROM core.outbox")
    stamps = {r["id"]: r["published_at"] for r in rows}
    assert stamps[old] == datetime(2026, 1, 1, tzinfo=UTC)  # a published row keeps its stamp
    assert stamps[fresh] is not None


async def test_other_roles_cannot_mark_outbox_rows(database_url: str) -> None:
    row_id = await _outbox_row(database_url)
    for role in ("spectral_producer", "spectral_executor", "spectral_projector"):
        async with session(database_url, role) as conn:
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.fetchval("SELECT core.outbox_mark_published($1, $2)", [row_id], [0])


async def test_maintenance_moves_and_empties_slots_but_cannot_rewrite_or_drop_the_outbox(
    database_url: str,
) -> None:
    row_id = await _outbox_row(database_url)
    async with session(database_url, "spectral_maintainer") as conn:
        for statement in (
            "UPDATE core.outbox SET published_at = now()",
            "UPDATE core.outbox SET envelope = '\\x00'",
            "TRUNCATE core.outbox",
            "TRUNCATE core.event_handled",
            "DELETE FROM core.outbox",
            (
                "INSERT INTO core.event_handled (consumer, dedup_key, event_id, outcome, "
                "source_partition, source_offset, slot) "
                "VALUES ('x', 'k', gen_random_uuid(), 'applied', 0, 0, 0)"
            ),
        ):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(statement)
        assert await conn.execute("UPDATE core.outbox SET slot = 1 WHERE id = $1", row_id) == (
            "UPDATE 1"
        )
