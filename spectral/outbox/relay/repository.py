"""The relay's database work, on ONE session: the shard locks live in that session, so the rows
of a shard are read and marked only while its lock is held, and a lost connection loses the locks
and the right to mark at the same time."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

import asyncpg

from spectral.db.connect import close_session, connect, guarded
from spectral.db.queries import load_queries
from spectral.outbox.relay.shards import DOORBELL_BASE, LOCK_CLASS, MEMBER_LOCK, SHARD_COUNT

_SQL: Final = load_queries(Path(__file__).with_name("queries.sql"))
"""The queries; the rows that wait for a delayed row (``delayed_keys``) and the fetch that
``mark_and_fetch`` runs after its mark (``fetch_batch``) are written once there, and the loader
puts their texts in where a query names them."""
RELAY_ROLE = "spectral_relay"
WAKEUP_CHANNEL = "spectral_outbox"
"""The channel the outbox's doorbell trigger notifies (migration ``outbox_wakeup``)."""


@dataclass(slots=True)
class OutboxRow:
    id: int
    event_type: str
    record_key: str
    idempotency_key: str
    envelope: bytes
    slot: int = 0
    """The outbox partition the row lives in (migration ``bounded_state``); marks name a row by
    (id, slot)."""
    ready_at: datetime | None = None
    """When the row became publishable: its write (``created_at``, the start of the INSERT
    statement that wrote it, shared by that statement's rows), or its ``available_at`` when
    that is later (a delayed event)."""


@dataclass(frozen=True, slots=True)
class OutboxStats:
    depth: int
    oldest_age_seconds: float


class RelayRepository:
    """One relay session: membership, shard locks, batches, marks, gauges. Its commits do not
    wait for the WAL flush (``marks_commit_async`` in queries.sql): whatever it writes must be
    safe to lose to a database crash, as a mark is (its rows are published again)."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn

    @classmethod
    async def open(cls, dsn: str, role: str | None = RELAY_ROLE) -> RelayRepository:
        conn = await connect(dsn, role=role)
        repo = cls(conn)
        await guarded("plan queue reads", lambda: conn.execute(_SQL["queue_reads"]))
        await guarded(
            "commit marks asynchronously", lambda: conn.execute(_SQL["marks_commit_async"])
        )
        await guarded(
            "join relays", lambda: conn.execute(_SQL["join_relays"], LOCK_CLASS, MEMBER_LOCK)
        )
        return repo

    async def close(self) -> None:
        """End the session: the server releases every lock it held."""
        await close_session(self._conn)

    async def count_relays(self) -> int:
        value = await guarded(
            "count relays",
            lambda: self._conn.fetchval(_SQL["count_relays"], LOCK_CLASS, MEMBER_LOCK),
        )
        return int(value)

    async def count_held_shards(self) -> int:
        """How many shards some relay (this one included) holds."""
        value = await guarded(
            "count held shards",
            lambda: self._conn.fetchval(_SQL["count_held_shards"], LOCK_CLASS, SHARD_COUNT),
        )
        return int(value)

    async def try_lock(self, candidates: Sequence[int], want: int) -> list[int]:
        if want <= 0 or not candidates:
            return []
        rows = await guarded(
            "lock shards",
            lambda: self._conn.fetch(_SQL["try_lock_shards"], LOCK_CLASS, list(candidates), want),
        )
        return [int(r["shard"]) for r in rows]

    async def unlock(self, shards: Sequence[int]) -> None:
        if shards:
            await guarded(
                "unlock shards",
                lambda: self._conn.fetch(_SQL["unlock_shards"], LOCK_CLASS, list(shards)),
            )

    async def fetch_batch(
        self,
        shards: Sequence[int],
        limit: int,
        *,
        leave_out: Sequence[str] = (),
        in_flight: Sequence[int] = (),
        mark: Sequence[OutboxRow] = (),
    ) -> list[OutboxRow]:
        """The next publishable rows of ``shards`` in id order, none of the keys ``leave_out``
        nor of the ids ``in_flight`` (a batch sent and not yet marked); first, in the same
        statement, the rows ``mark`` are marked published (``mark_published``)."""
        if not shards:
            await self.mark_published(mark)
            return []
        every = len(set(shards)) == SHARD_COUNT
        args: tuple[object, ...] = (
            SHARD_COUNT,
            None if every else sorted(shards),
            limit,
            list(leave_out),
            [*in_flight, *(r.id for r in mark)],
        )
        if mark:
            sql = _SQL["mark_and_fetch"]
            args = (*args, [r.id for r in mark], [r.slot for r in mark])
        else:
            sql = _SQL["fetch_batch"]
        rows = await guarded("fetch outbox batch", lambda: self._conn.fetch(sql, *args))
        if mark and rows and rows[0][0] is None:  # nothing to fetch: the mark's row alone
            return []
        # the columns in the query's order: id, slot, event_type, record_key, idempotency_key,
        # envelope (bytea: bytes), ready_at
        return [
            OutboxRow(row_id, event_type, record_key, idempotency_key, envelope, slot, ready_at)
            for row_id, slot, event_type, record_key, idempotency_key, envelope, ready_at in rows
        ]

    async def listen(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` whenever a writer rings the doorbell (for this session's life)."""
        await guarded(
            "listen",
            lambda: self._conn.add_listener(WAKEUP_CHANNEL, lambda *_: wake()),
        )

    async def await_doorbell(self, slot: int, wait: float) -> bool:
        """Take doorbell slot ``slot`` for this session, waiting at most ``wait`` seconds for
        the writers in flight to commit; False when they did not in time."""
        armed = await guarded(
            "arm the doorbell",
            lambda: self._conn.fetchval(_SQL["await_doorbell"], slot, max(1, round(wait * 1000))),
        )
        return bool(armed)

    async def release_doorbell(self, slot: int) -> None:
        await self.unlock([DOORBELL_BASE + slot])

    async def mark_published(self, rows: Sequence[OutboxRow]) -> None:
        if rows:
            await guarded(
                "mark published",
                lambda: self._conn.execute(
                    _SQL["mark_published"], [r.id for r in rows], [r.slot for r in rows]
                ),
            )

    async def stats(self) -> OutboxStats:
        row = await guarded("outbox stats", lambda: self._conn.fetchrow(_SQL["outbox_stats"]))
        assert row is not None  # noqa: S101 - an aggregate always returns one row
        return OutboxStats(int(row["depth"]), float(row["oldest_age"]))


class OutboxStatsReader:
    """The outbox's depth and oldest age on a session of its own: no relay member (it takes no
    lock and is not counted when the relays share the shards out), for the relay's gauges and
    ``spectral outbox status``."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn

    @classmethod
    async def open(cls, dsn: str, role: str | None = RELAY_ROLE) -> OutboxStatsReader:
        return cls(await connect(dsn, role=role))

    async def stats(self, timeout: float | None = None) -> OutboxStats:  # noqa: ASYNC109 - a statement timeout, passed to asyncpg
        row = await guarded(
            "outbox stats", lambda: self._conn.fetchrow(_SQL["outbox_stats"], timeout=timeout)
        )
        assert row is not None  # noqa: S101 - an aggregate always returns one row
        return OutboxStats(int(row["depth"]), float(row["oldest_age"]))

    async def close(self) -> None:
        await close_session(self._conn)
