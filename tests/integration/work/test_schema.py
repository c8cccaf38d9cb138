"""The work schema itself: the ledger refuses UPDATE, DELETE and TRUNCATE whoever asks, one live
thread per identity, one live item per thread, one prompt per attempt, and the role grants."""

from __future__ import annotations

import json
import uuid

import asyncpg
import pytest

from spectral.db.connect import connect

pytestmark = pytest.mark.integration


async def _seed(conn: asyncpg.Connection) -> tuple[uuid.UUID, uuid.UUID, uuid.UUID]:
    thread, item, entry = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    await conn.execute(
        """INSERT INTO work.threads (thread_id, kind, space_type, space_id, target_ref, status,
                                     idempotency_key)
           VALUES ($1, 'story_generate_epic', 'project', 'p1', '{"document_id":"d"}', 'open',
                   'k1')""",
        thread,
    )
    await conn.execute(
        """INSERT INTO work.work_items (work_item_id, thread_id, sequence, status, lock_scope,
                                        project_id, function_key, input)
           VALUES ($1, $2, 1, 'queued', 'epic:d/E1', 'p1', 'story_generate', '{}')""",
        item,
        thread,
    )
    await conn.execute(
        """INSERT INTO work.ledger_entries (entry_id, thread_id, work_item_id, attempt,
                                            entry_type, payload, hash)
           VALUES ($1, $2, $3, 1, 'prompt', '{"prompt":"p"}', repeat('a', 64))""",
        entry,
        thread,
        item,
    )
    return thread, item, entry


@pytest.mark.parametrize("role", [None, "spectral_executor"])
async def test_the_ledger_refuses_update_delete_and_truncate(
    database_url: str, role: str | None
) -> None:
    owner = await connect(database_url)  # the migrating login: owner of the table, superuser here
    try:
        _, _, entry = await _seed(owner)
    finally:
        await owner.close()
    conn = await connect(database_url, role=role)
    try:
        for statement in (
            "UPDATE work.ledger_entries SET payload = '{}' WHERE entry_id = $1",
            "DELETE FROM work.ledger_entries WHERE entry_id = $1",
        ):
            with pytest.raises(asyncpg.PostgresError, match=r"append-only|permission denied"):
                await conn.execute(statement, entry)
        with pytest.raises(asyncpg.PostgresError, match=r"append-only|permission denied"):
            await conn.execute("TRUNCATE work.ledger_entries")
        count = await conn.fetchval("SELECT count(*) FROM work.ledger_entries")
    finally:
        await conn.close()
    assert count == 1


async def test_the_owner_is_refused_by_the_trigger_itself(database_url: str) -> None:
    conn = await connect(database_url)
    try:
        _, _, entry = await _seed(conn)
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="append-only: UPDATE"):
            await conn.execute(
                "UPDATE work.ledger_entries SET attempt = 2 WHERE entry_id = $1", entry
            )
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="append-only: DELETE"):
            await conn.execute("DELETE FROM work.ledger_entries")
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="append-only: TRUNCATE"):
            await conn.execute("TRUNCATE work.ledger_entries CASCADE")
        # Deleting what the ledger references is refused too (no cascade around the trigger).
        with pytest.raises(asyncpg.ForeignKeyViolationError):
            await conn.execute("DELETE FROM work.work_items")
    finally:
        await conn.close()


async def test_uniqueness_rules_hold_in_the_database(database_url: str) -> None:
    conn = await connect(database_url)
    try:
        thread, item, _ = await _seed(conn)
        with pytest.raises(asyncpg.UniqueViolationError, match="threads_one_active_per_identity"):
            await conn.execute(
                """INSERT INTO work.threads (thread_id, kind, space_type, space_id, target_ref,
                                             status, idempotency_key)
                   VALUES ($1, 'story_generate_epic', 'project', 'p1', '{}', 'running', 'k1')""",
                uuid.uuid4(),
            )
        with pytest.raises(asyncpg.UniqueViolationError, match="work_items_one_live_per_thread"):
            await conn.execute(
                """INSERT INTO work.work_items (work_item_id, thread_id, sequence, status,
                                                lock_scope, project_id, function_key, input)
                   VALUES ($1, $2, 2, 'queued', 'epic:d/E1', 'p1', 'story_generate', '{}')""",
                uuid.uuid4(),
                thread,
            )
        with pytest.raises(asyncpg.UniqueViolationError, match="ledger_one_per_attempt"):
            await conn.execute(
                """INSERT INTO work.ledger_entries (entry_id, thread_id, work_item_id, attempt,
                                                    entry_type, payload, hash)
                   VALUES ($1, $2, $3, 1, 'prompt', '{}', repeat('b', 64))""",
                uuid.uuid4(),
                thread,
                item,
            )
        # Errors are not limited per attempt (a late answer may still be refused).
        for _ in range(2):
            await conn.execute(
                """INSERT INTO work.ledger_entries (entry_id, thread_id, work_item_id, attempt,
                                                    entry_type, payload, hash)
                   VALUES ($1, $2, $3, 1, 'error', $4::jsonb, repeat('c', 64))""",
                uuid.uuid4(),
                thread,
                item,
                json.dumps({"kind": "transient"}),
            )
    finally:
        await conn.close()


async def test_roles_get_what_they_need_and_nothing_more(database_url: str) -> None:
    owner = await connect(database_url)
    try:
        thread, item, _ = await _seed(owner)
    finally:
        await owner.close()
    executor = await connect(database_url, role="spectral_executor")
    operator = await connect(database_url, role="spectral_operator")
    producer = await connect(database_url, role="spectral_producer")
    try:
        await executor.execute(
            "UPDATE work.work_items SET status = 'failed' WHERE work_item_id = $1", item
        )
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await executor.execute(
                "UPDATE work.work_items SET input = '{}' WHERE work_item_id = $1", item
            )
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await executor.execute("DELETE FROM work.threads WHERE thread_id = $1", thread)
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await producer.execute(
                """INSERT INTO work.ledger_entries (entry_id, thread_id, attempt, entry_type,
                                                    payload, hash)
                   VALUES ($1, $2, 0, 'error', '{}', repeat('d', 64))""",
                uuid.uuid4(),
                thread,
            )
        # Commands append cancellation entries through a function that takes nothing else.
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="only cancellation"):
            await producer.execute(
                "SELECT work.append_cancellation_entries(ARRAY[$1::uuid], ARRAY[$2::uuid], "
                'ARRAY[NULL::uuid], ARRAY[0], ARRAY[\'{"kind": "response"}\'], '
                "ARRAY[repeat('d', 64)])",
                uuid.uuid4(),
                thread,
            )
        assert await operator.fetchval("SELECT count(*) FROM work.ledger_entries") == 1
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await operator.execute("UPDATE work.threads SET status = 'canceled'")
    finally:
        for conn in (executor, operator, producer):
            await conn.close()
