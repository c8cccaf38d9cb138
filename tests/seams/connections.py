"""The connections contract (spectral.engine.transaction.Connections): a lent connection runs a
batch's ``conn.transaction()`` block; when it fails, only that block is undone; ``commits`` says
whether a finished block is already visible to other sessions (True) or waits for an outer
transaction (False: a savepoint). A concrete suite subclasses :class:`ConnectionsContract` and
provides the ``world`` fixture: a :class:`LenderWorld`."""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod

import asyncpg
import pytest

from spectral.engine.transaction import Connections


class LenderWorld(ABC):
    """A lender of the implementation under test on a database with a table ``seam_rows(n)``,
    and a connection of another session to look from."""

    lender: Connections
    observer: asyncpg.Connection

    @abstractmethod
    async def finish(self) -> None:
        """End what the lender holds the way a run that keeps its work does (commit an outer
        transaction, if any)."""


class _BoomError(Exception):
    pass


async def _rows(conn: asyncpg.Connection) -> list[int]:
    return [r[0] for r in await conn.fetch("SELECT n FROM seam_rows ORDER BY n")]


async def _insert_then_fail(lender: Connections, n: int) -> None:
    async with lender.lend() as conn, conn.transaction():
        await conn.execute("INSERT INTO seam_rows VALUES ($1)", n)
        raise _BoomError


class ConnectionsContract:
    async def test_a_finished_block_is_seen_by_others_when_and_only_when_it_commits(
        self, world: LenderWorld
    ) -> None:
        async with world.lender.lend() as conn, conn.transaction():
            await conn.execute("INSERT INTO seam_rows VALUES (1)")
        assert await _rows(world.observer) == ([1] if world.lender.commits else [])
        await world.finish()
        assert await _rows(world.observer) == [1]

    async def test_a_failed_block_undoes_only_itself(self, world: LenderWorld) -> None:
        async with world.lender.lend() as conn, conn.transaction():
            await conn.execute("INSERT INTO seam_rows VALUES (1)")
        with pytest.raises(_BoomError):
            await _insert_then_fail(world.lender, 2)
        with contextlib.suppress(asyncpg.UniqueViolationError):
            async with world.lender.lend() as conn, conn.transaction():
                await conn.execute("INSERT INTO seam_rows VALUES (3), (3)")
        async with world.lender.lend() as conn, conn.transaction():
            await conn.execute("INSERT INTO seam_rows VALUES (4)")
        async with world.lender.lend() as conn:
            assert await _rows(conn) == [1, 4]
        await world.finish()
        assert await _rows(world.observer) == [1, 4]
