"""All of maintenance's database work, on ONE session acting as ``spectral_maintainer``.

The session holds the advisory lock that lets one maintenance run at a time; every rotation and
truncation is its own short transaction with a ``lock_timeout``: the transactions in flight on a
table finish first, the ones that come after wait at most that long.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final, TypeVar

import asyncpg

from spectral.db.connect import close_session, connect, guarded
from spectral.db.locks import LockClass
from spectral.db.queries import load_queries
from spectral.errors import SpectralError
from spectral.maintenance.policy import (
    DEDUP_SLOTS,
    OUTBOX_SLOTS,
    DedupGeneration,
    DedupRotation,
    OutboxGeneration,
)

_SQL: Final = load_queries(Path(__file__).with_name("queries.sql"))
MAINTAINER_ROLE: Final = "spectral_maintainer"
LOCK_CLASS: Final = LockClass.MAINTENANCE
RUN_LOCK: Final = 1
T = TypeVar("T")


class LockTimeoutError(SpectralError):
    """A table stayed locked by other transactions for longer than the lock timeout."""


def partition(table: str, slot: int) -> str:
    """The partition of ``table`` (``event_handled`` or ``outbox``) holding ``slot``."""
    slots = {"event_handled": DEDUP_SLOTS, "outbox": OUTBOX_SLOTS}[table]
    if not 0 <= slot < slots:
        raise ValueError(f"no slot {slot} in core.{table}")
    return f"core.{table}_{slot}"


@dataclass(frozen=True, slots=True)
class PartitionSize:
    table: str
    partition: str
    rows: int
    """The statistics' estimate of live rows."""
    bytes: int


@dataclass(frozen=True, slots=True)
class Unpublished:
    rows: int
    movable: int
    """Rows no relay can publish within the delay margin (delayed beyond it, or queued behind an
    earlier row of their key that is)."""

    @property
    def due(self) -> int:
        return self.rows - self.movable


def _aware(row: asyncpg.Record) -> dict[str, object]:
    """The row as keyword arguments, ±infinity timestamps as aware datetime.min / max (asyncpg
    returns them naive)."""
    return {
        key: value.replace(tzinfo=UTC)
        if isinstance(value, datetime) and value.tzinfo is None
        else value
        for key, value in row.items()
    }


class MaintenanceRepository:
    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn

    @classmethod
    async def open(cls, dsn: str, role: str | None = MAINTAINER_ROLE) -> MaintenanceRepository:
        return cls(await connect(dsn, role=role))

    async def close(self) -> None:
        await close_session(self._conn)

    # -- reading --------------------------------------------------------------------------------

    async def try_lock(self) -> bool:
        return bool(
            await guarded(
                "maintenance lock",
                lambda: self._conn.fetchval(_SQL["try_lock"], LOCK_CLASS, RUN_LOCK),
            )
        )

    async def unlock(self) -> None:
        await guarded(
            "maintenance unlock",
            lambda: self._conn.fetchval(_SQL["unlock"], LOCK_CLASS, RUN_LOCK),
        )

    async def clock(self) -> datetime:
        value: datetime = await guarded("clock", lambda: self._conn.fetchval(_SQL["clock"]))
        return value

    async def dedup_generations(self) -> list[DedupGeneration]:
        rows = await guarded(
            "read dedup generations", lambda: self._conn.fetch(_SQL["dedup_generations"])
        )
        return [DedupGeneration(**_aware(r)) for r in rows]  # type: ignore[arg-type]

    async def outbox_generations(self) -> list[OutboxGeneration]:
        rows = await guarded(
            "read outbox generations", lambda: self._conn.fetch(_SQL["outbox_generations"])
        )
        return [OutboxGeneration(**_aware(r)) for r in rows]  # type: ignore[arg-type]

    async def consumers_in_slot(self, slot: int) -> list[str]:
        rows = await guarded(
            "list consumers", lambda: self._conn.fetch(_SQL["consumers_in_slot"], slot)
        )
        return [str(r["consumer"]) for r in rows]

    async def recent_redrives(self, since: datetime) -> list[tuple[str, datetime]]:
        """(DLQ topic, earliest redrive) of the dead letters redriven after ``since``."""
        rows = await guarded(
            "read recent redrives", lambda: self._conn.fetch(_SQL["recent_redrives"], since)
        )
        return [(str(r["dlq_topic"]), r["first_redriven_at"]) for r in rows]

    async def unpublished(self, slot: int, margin: timedelta) -> Unpublished:
        row = await guarded(
            "count unpublished rows",
            lambda: self._conn.fetchrow(_SQL["outbox_unpublished"], slot, margin),
        )
        assert row is not None  # noqa: S101 - an aggregate always returns one row
        return Unpublished(int(row["unpublished"]), int(row["movable"]))

    async def table_sizes(self) -> list[PartitionSize]:
        rows = await guarded("table sizes", lambda: self._conn.fetch(_SQL["table_sizes"]))
        return [
            PartitionSize(
                f"core.{r['parent']}", f"core.{r['partition']}", int(r["rows"]), int(r["bytes"])
            )
            for r in rows
        ]

    async def estimated_rows(self, name: str) -> int:
        value = await guarded(
            "estimate rows", lambda: self._conn.fetchval(_SQL["estimated_rows"], name)
        )
        return int(value or 0)

    # -- the outbox -----------------------------------------------------------------------------

    async def evacuate_delayed(self, slot: int, margin: timedelta) -> int:
        status = await guarded(
            "move delayed outbox rows",
            lambda: self._conn.execute(_SQL["evacuate_delayed"], slot, margin),
        )
        return int(status.split()[-1])

    async def mark_fully_published(self, generation: int) -> None:
        async def mark() -> None:
            now = await self._conn.fetchval(_SQL["clock"])
            await self._conn.execute(_SQL["mark_fully_published"], generation, now)

        await guarded("mark generation published", mark)

    async def truncate_outbox(self, generation: OutboxGeneration, lock_timeout: timedelta) -> int:
        """Empty the generation's slot; returns the rows pruned (estimate), or -1 when an
        unpublished row turned up under the lock (nothing is pruned then)."""
        name = partition("outbox", generation.slot)

        async def work(conn: asyncpg.Connection) -> int:
            await conn.execute(_SQL["lock_outbox_partition"].format(partition=name))
            left = await conn.fetchrow(_SQL["outbox_unpublished"], generation.slot, timedelta(0))
            if left is not None and int(left["unpublished"]) > 0:
                return -1
            rows = int(await conn.fetchval(_SQL["estimated_rows"], name) or 0)
            await conn.execute(_SQL["truncate_partition"].format(partition=name))
            now = await conn.fetchval(_SQL["clock"])
            await conn.execute(_SQL["mark_truncated"], generation.generation, now, rows)
            return rows

        return await self._locked("empty outbox generation", lock_timeout, work)

    async def rotate_outbox(
        self, current: OutboxGeneration, slot: int, lock_timeout: timedelta
    ) -> None:
        partition("outbox", slot)  # validates the slot

        async def work(conn: asyncpg.Connection) -> None:
            await conn.execute(_SQL["lock_outbox_writers"])
            now = await conn.fetchval(_SQL["clock"])
            status = await conn.execute(_SQL["end_outbox_generation"], current.generation, now)
            if status != "UPDATE 1":
                raise RuntimeError(f"outbox generation {current.generation} is no longer current")
            await conn.execute(_SQL["start_outbox_generation"], current.generation + 1, slot, now)

        await self._locked("start outbox generation", lock_timeout, work)

    # -- the dedup record -----------------------------------------------------------------------

    async def rotate_dedup(self, rotation: DedupRotation, lock_timeout: timedelta) -> int:
        """Forget the previous generation (TRUNCATE its slot), end the current one and start the
        next; returns the rows forgotten (estimate)."""
        forget = rotation.forget

        async def work(conn: asyncpg.Connection) -> int:
            await conn.execute(_SQL["lock_dedup"])
            now = await conn.fetchval(_SQL["clock"])
            rows = 0
            if forget is not None:
                name = partition("event_handled", forget.slot)
                rows = int(await conn.fetchval(_SQL["estimated_rows"], name) or 0)
                await conn.execute(_SQL["truncate_partition"].format(partition=name))
                status = await conn.execute(
                    _SQL["forget_generation"],
                    forget.generation,
                    now,
                    rotation.lifetime,
                    rows,
                )
                if status != "UPDATE 1":
                    raise RuntimeError(f"dedup generation {forget.generation} changed meanwhile")
            status = await conn.execute(
                _SQL["end_dedup_generation"], rotation.current.generation, now
            )
            if status != "UPDATE 1":
                raise RuntimeError(
                    f"dedup generation {rotation.current.generation} is no longer current"
                )
            await conn.execute(
                _SQL["start_dedup_generation"], rotation.new_generation, rotation.new_slot, now
            )
            return rows

        return await self._locked("rotate the dedup record", lock_timeout, work)

    # -- transactions ---------------------------------------------------------------------------

    async def _locked(
        self,
        what: str,
        lock_timeout: timedelta,
        work: Callable[[asyncpg.Connection], Awaitable[T]],
    ) -> T:
        """``work`` in one transaction whose lock waits end after ``lock_timeout``."""

        async def transaction() -> T:
            async with self._conn.transaction():
                await self._conn.fetchval(
                    _SQL["set_lock_timeout"], f"{max(lock_timeout.total_seconds(), 0.001):.3f}s"
                )
                return await work(self._conn)

        try:
            return await guarded(what, transaction)
        except SpectralError as exc:
            if isinstance(exc.__cause__, asyncpg.LockNotAvailableError):
                raise LockTimeoutError(
                    f"{what}: gave up after waiting {lock_timeout.total_seconds():g} s for "
                    "transactions in flight on the table"
                ) from exc
            raise
