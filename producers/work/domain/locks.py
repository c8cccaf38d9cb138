"""The locks of ADR-035 §9 and their order rule, enforced in code.

Implementation: PostgreSQL *transaction-scoped* advisory locks (``pg_advisory_xact_lock``),
keyed by (kind, 32-bit hash of the scope). Why these:

* they are released by COMMIT/ROLLBACK — and by the server when a crashed worker's connection
  drops — so a lock can never outlive its holder (no lock rows to recover, no lock table);
* they are visible while held (``pg_locks`` where ``locktype = 'advisory'`` and ``classid`` is
  one of the kinds below), which answers ADR-0023's concern about invisible state;
* the *lease* of a work item is a different thing (a stamped row, ADR-0023), because it must
  survive across transactions — it covers the paid call, which no transaction may span.

Kinds: ``TARGET`` (``epic:{document}/{epic}``) serialises mutations of one target; ``PROJECT``
(``project:{id}``) serialises orchestration in one project (opening a generate-all and its
children, closing a parent when its children are terminal). A hash collision between two scopes
only makes them wait for each other, never lets two holders in.

Order rule (deadlock freedom): a transaction takes the project lock first, then target locks
in ascending scope order; asking for the project lock while holding a target lock, or for a
target lock "below" one already held, raises ``LockOrderError`` before touching the database.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

from producers.work.domain.types import Conn
from spectral.db.locks import LockClass
from spectral.db.queries import load_queries
from spectral.errors import SpectralError

_SQL = load_queries(Path(__file__).with_name("queries.sql"))


class LockOrderError(SpectralError):
    """A programming error: the lock-order rule of ADR-035 §9 would be broken."""


class LockKind(IntEnum):
    """The lock classes of the work domain (spectral/db/locks.py holds every class)."""

    PROJECT = LockClass.WORK_PROJECT
    TARGET = LockClass.WORK_TARGET


@dataclass(frozen=True, order=True)
class LockKey:
    kind: LockKind
    scope: str

    @property
    def objid(self) -> int:
        """A stable signed 32-bit key for the scope (blake2b, not Python's salted hash)."""
        digest = hashlib.blake2b(self.scope.encode("utf-8"), digest_size=4).digest()
        return int.from_bytes(digest, "big", signed=True)


def check_order(held: Sequence[LockKey], wanted: LockKey) -> None:
    """Raise ``LockOrderError`` if taking ``wanted`` after ``held`` breaks the order rule."""
    targets = [key for key in held if key.kind is LockKind.TARGET]
    if wanted.kind is LockKind.PROJECT:
        if targets:
            raise LockOrderError(
                f"project lock {wanted.scope!r} requested while holding target lock "
                f"{targets[-1].scope!r}: a project lock may not be acquired while holding an "
                "epic lock (ADR-035 §9)"
            )
        if any(key.kind is LockKind.PROJECT and key != wanted for key in held):
            raise LockOrderError("one project lock per transaction")
    elif targets and wanted.scope < max(key.scope for key in targets):
        raise LockOrderError(
            f"target lock {wanted.scope!r} requested after {max(k.scope for k in targets)!r}: "
            "take target locks in ascending scope order"
        )


class TransactionLocks:
    """The locks one transaction holds; every acquisition goes through the order rule."""

    def __init__(self, conn: Conn) -> None:
        self._conn = conn
        self._held: list[LockKey] = []

    @property
    def held(self) -> tuple[LockKey, ...]:
        return tuple(self._held)

    async def project(self, scope: str) -> None:
        await self._acquire(LockKey(LockKind.PROJECT, scope))

    async def target(self, scope: str) -> None:
        await self._acquire(LockKey(LockKind.TARGET, scope))

    async def targets(self, scopes: Iterable[str]) -> None:
        """Take the target locks of ``scopes`` in ascending scope order, in one statement."""
        keys = sorted({LockKey(LockKind.TARGET, scope) for scope in scopes} - set(self._held))
        if not keys:
            return
        held = list(self._held)
        for key in keys:
            check_order(held, key)
            held.append(key)
        if not self._conn.is_in_transaction():
            raise LockOrderError("transaction-scoped locks need an open transaction")
        await self._conn.fetchval(
            _SQL["advisory_xact_locks"], [int(k.kind) for k in keys], [k.objid for k in keys]
        )
        self._held.extend(keys)

    async def _acquire(self, key: LockKey) -> None:
        if key in self._held:
            return
        check_order(self._held, key)
        if not self._conn.is_in_transaction():
            raise LockOrderError("transaction-scoped locks need an open transaction")
        await self._conn.execute(_SQL["advisory_xact_lock"], int(key.kind), key.objid)
        self._held.append(key)
