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
