"""One connection holding one transaction across every batch of a run (dry runs, rebuilds).

The engine runs each batch in ``conn.transaction()``; on a connection that already has a
transaction open, asyncpg makes that a savepoint. So a batch that fails rolls back to its
savepoint as usual (the engine's one-by-one fallback works unchanged) while everything the
batches keep stays in the one outer transaction, which the caller rolls back (dry run) or
commits (rebuild) at the end.

Row changes are counted from ``pg_stat_xact_user_tables``: its counters include the work of
savepoints that were rolled back, so :meth:`HeldTransaction.lend` reads them before and after
each batch and adds the difference only when the batch's savepoint was released.

If the connection is lost, the transaction is lost with it: ``lend`` raises
:class:`TransactionLostError` (not transient, so the engine does not retry it) and the run
ends having changed nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Self

import asyncpg
from asyncpg.transaction import Transaction

from spectral.db.connect import guarded
from spectral.db.queries import load_queries
from spectral.errors import SpectralError

_SQL: Final = load_queries(Path(__file__).with_name("held_transaction.sql"))


class TransactionLostError(SpectralError):
    """The held transaction's connection is gone: nothing it did was committed."""


@dataclass(frozen=True, slots=True)
class TableChange:
    """Row operations on one table: what the transaction inserted, updated and deleted."""

    table: str
    inserted: int
    updated: int
    deleted: int

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "inserted": self.inserted,
            "updated": self.updated,
            "deleted": self.deleted,
        }


class HeldTransaction:
    """``async with HeldTransaction(conn) as held``: ``held`` lends the engine its connections
    (each batch a savepoint: nothing commits per batch); ``held.commit()`` keeps the work,
    leaving the block without it rolls it back."""

    commits = False

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn
        self._transaction: Transaction | None = None
        self._counts: Counter[tuple[str, str]] = Counter()
        self._done = False

    async def __aenter__(self) -> Self:
        # READ COMMITTED, as the engine runs each batch (a savepoint here, which asyncpg refuses
        # at another level than the outer transaction's): the claims must see a rotation that
        # committed while they waited, whatever the session's default level.
        self._transaction = self.conn.transaction(isolation="read_committed")
        await guarded("begin the held transaction", self._transaction.start)
        return self

    async def __aexit__(self, *_: object) -> None:
        if not self._done and self._transaction is not None and not self.conn.is_closed():
            await self._transaction.rollback()
        self._done = True

    async def rollback(self) -> None:
        self._check()
        assert self._transaction is not None  # noqa: S101 - started in __aenter__
        await guarded("roll back the held transaction", self._transaction.rollback)
        self._done = True

    async def commit(self) -> None:
        self._check()
        assert self._transaction is not None  # noqa: S101 - started in __aenter__
        await guarded("commit the held transaction", self._transaction.commit)
        self._done = True

    @asynccontextmanager
    async def lend(self) -> AsyncIterator[asyncpg.Connection]:
        """The connection for one batch; counts the batch's row changes if it is kept."""
        self._check()
        before = await self._row_changes()
        yield self.conn
        # Reached only when the batch's block exited normally (its savepoint was released).
        after = await self._row_changes()
        for key, count in after.items():
            self._counts[key] += count - before.get(key, 0)

    def changes(self) -> list[TableChange]:
        """Rows inserted / updated / deleted per table by every kept batch so far."""
        tables = sorted({table for table, _ in self._counts})
        out = [
            TableChange(
                table,
                self._counts[(table, "inserted")],
                self._counts[(table, "updated")],
                self._counts[(table, "deleted")],
            )
            for table in tables
        ]
        return [c for c in out if c.inserted or c.updated or c.deleted]

    def _check(self) -> None:
        if self._done:
            raise TransactionLostError("the held transaction has already ended")
        if self.conn.is_closed():
            raise TransactionLostError(
                "the database connection holding the transaction was lost; nothing was committed"
            )

    async def _row_changes(self) -> dict[tuple[str, str], int]:
        rows = await self.conn.fetch(_SQL["row_changes"])
        out: dict[tuple[str, str], int] = {}
        for row in rows:
            for kind in ("inserted", "updated", "deleted"):
                out[(row["table_name"], kind)] = row[kind]
        return out
