"""Who created a token or a thread: the name a session declares (spectral.actor, which any
session may set) is recorded beside the database login, which it cannot choose — not even by
writing the column itself."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

pytestmark = pytest.mark.integration


async def test_a_forged_declaration_is_recorded_beside_the_real_login(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        login = await conn.fetchval("SELECT session_user")
        async with conn.transaction():
            await conn.execute("SET LOCAL ROLE spectral_producer")
            await conn.execute("SELECT set_config('spectral.actor', 'token:someone-else', true)")
            thread = uuid.uuid4()
            await conn.execute(
                """
                INSERT INTO work.threads (thread_id, kind, space_type, space_id, target_ref,
                                          status, idempotency_key, requested_by_login)
                VALUES ($1, 'story_generate_epic', 'project', 'p', '{}', 'open', $2, 'forged')
                """,
                thread,
                f"k-{thread}",
            )
        async with conn.transaction():
            await conn.execute("SET LOCAL ROLE spectral_token_admin")
            await conn.execute("SELECT set_config('spectral.actor', 'cli:someone-else', true)")
            token = uuid.uuid4()
            await conn.execute(
                """
                INSERT INTO core.api_tokens (token_id, name, token_hash, display_prefix, scopes,
                                             created_by_login)
                VALUES ($1, 'forger', repeat('a', 64), 'sha256:aaaaaaaa', ARRAY['ops:read'],
                        'forged')
                """,
                token,
            )
        # An update (by the owner here: it may write any column) keeps the login too.
        await conn.execute(
            "UPDATE work.threads SET requested_by_login = 'forged' WHERE thread_id = $1", thread
        )
        row = await conn.fetchrow(
            "SELECT requested_by, requested_by_login FROM work.threads WHERE thread_id = $1",
            thread,
        )
        assert row is not None
        assert tuple(row) == ("token:someone-else", login)
        row = await conn.fetchrow(
            "SELECT created_by, created_by_login FROM core.api_tokens WHERE token_id = $1", token
        )
        assert row is not None
        assert tuple(row) == ("cli:someone-else", login)
    finally:
        await conn.close()
