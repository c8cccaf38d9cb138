"""The held transaction (dry runs, rebuilds) passes the connections contract (tests/seams)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from spectral.replay.held_transaction import HeldTransaction
from tests.seams.connections import ConnectionsContract, LenderWorld

pytestmark = pytest.mark.integration


class _Held(LenderWorld):
    def __init__(self, held: HeldTransaction, observer: asyncpg.Connection) -> None:
        self.lender = held
        self.observer = observer
        self._held = held

    async def finish(self) -> None:
        await self._held.commit()


class TestHeldTransaction(ConnectionsContract):
    @pytest.fixture
    async def world(self, database_url: str) -> AsyncIterator[LenderWorld]:
        conn = await asyncpg.connect(database_url)
        observer = await asyncpg.connect(database_url)
        try:
            await conn.execute("CREATE TABLE seam_rows (n int PRIMARY KEY)")
            async with HeldTransaction(conn) as held:
                yield _Held(held, observer)
        finally:
            await observer.close()
            await conn.close()


async def test_a_held_transaction_runs_the_engines_batches_whatever_the_sessions_default(
    database_url: str,
) -> None:
    """The engine runs each batch at READ COMMITTED (its claims must see a rotation that
    committed while they waited); within the held transaction a batch is a savepoint, which
    asyncpg refuses when the outer transaction's level differs. With the session's default at
    REPEATABLE READ (an operator may set it for a role or a database), a dry run or a rebuild
    must still run its batches, at READ COMMITTED."""
    conn = await asyncpg.connect(
        database_url, server_settings={"default_transaction_isolation": "repeatable read"}
    )
    observer = await asyncpg.connect(database_url)
    try:
        await conn.execute("CREATE TABLE seam_rows (n int PRIMARY KEY)")
        async with HeldTransaction(conn) as held:
            async with held.lend() as lent, lent.transaction(isolation="read_committed"):
                await lent.execute("INSERT INTO seam_rows VALUES (1)")
                level = await lent.fetchval("SHOW transaction_isolation")
            await held.commit()
        assert level == "read committed"
        assert await observer.fetchval("SELECT count(*) FROM seam_rows") == 1
    finally:
        await observer.close()
        await conn.close()
