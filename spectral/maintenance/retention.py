"""Retention: every table that grows with traffic is pruned behind a horizon, by `spectral
maintenance` (one step of its pass, after the outbox and the dedup record).

A :class:`RetentionTask` prunes one table and says what it did (:class:`Pruned`). spectral's own:

* ``core.dead_letters`` (dead letters the broker refused even as a reference): kept
  ``SPECTRAL_DEAD_LETTER_TABLE_RETENTION_SECONDS`` after they were recorded — by default as long
  as the dead-letter topics keep their records (``SPECTRAL_DLQ_RETENTION_MS``; -1: for ever);
* ``core.dlq_redrives`` (which dead letters were redriven, so none is redriven twice): a row is
  kept while its dead letter, or the copy the redrive wrote, may still be read — the longer of
  the two topics' readable lifetimes as the broker states them (retention, segment roll,
  timestamp skew, retention check; spectral/kafka/retention.py) plus
  ``SPECTRAL_DEDUP_GRACE_SECONDS``. A topic that keeps records for ever keeps its rows for ever,
  and a broker that cannot be asked holds the prune back;
* ``core.api_tokens``: tokens revoked or expired longer than ``SPECTRAL_TOKEN_RETENTION_SECONDS``
  ago (the audit trail keeps the names they acted under).

A feature adds the tasks of its own tables (its failures, say) the same way. Deletes go in
batches of :data:`BATCH` rows, each its own transaction, at most :data:`MOST_PER_PASS` rows per
table and pass, so a first pass over a large backlog never holds a table for long. A dry run
counts what would go and deletes nothing. Tables kept by design (the work ledger, the triage
audit trail) are only measured (:class:`Measured`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Final, Protocol

import asyncpg

from spectral.db.connect import guarded
from spectral.db.queries import load_queries
from spectral.errors import SpectralError
from spectral.kafka.retention import BrokerRetention

_SQL: Final = load_queries(Path(__file__).with_name("retention.sql"))

BATCH: Final = 5_000
MOST_PER_PASS: Final = 200_000

DescribeRetention = Callable[[Sequence[str]], Awaitable[BrokerRetention]]


@dataclass(frozen=True, slots=True)
class Pruned:
    """What one task did in one pass."""

    table: str
    rows: int = 0
    """Deleted (a dry run: would be)."""
    horizon_seconds: float | None = None
    """Rows older than this went (None: none can go, ``held`` says why)."""
    held: str | None = None
    more: bool = False
    """The pass stopped at its bound: more rows are due (the next pass goes on)."""


class RetentionTask(Protocol):
    """Prunes one table (see the module docstring)."""

    @property
    def table(self) -> str:
        """The table, schema-qualified: the ``table`` label of its metrics."""
        ...

    async def prune(self, conn: asyncpg.Connection, now: datetime, *, dry_run: bool) -> Pruned:
        """Prune (or, ``dry_run``, count) what is past the horizon as of ``now``."""
        ...


async def delete_in_batches(
    conn: asyncpg.Connection,
    what: str,
    statement: str,
    *args: object,
    most: int = MOST_PER_PASS,
) -> tuple[int, bool]:
    """Run ``statement`` (a DELETE of at most ``$n`` rows, ``n`` = its last parameter) until it
    deletes fewer than a batch or ``most`` rows went; (rows, stopped at the bound)."""
    deleted = 0
    while deleted < most:
        status = await guarded(what, lambda: conn.execute(statement, *args, BATCH))
        rows = int(str(status).rsplit(" ", 1)[-1])
        deleted += rows
        if rows < BATCH:
            return deleted, False
    return deleted, True


async def count(conn: asyncpg.Connection, what: str, statement: str, *args: object) -> int:
    return int(await guarded(what, lambda: conn.fetchval(statement, *args)))


@dataclass(frozen=True)
class DeadLetterTable:
    """``core.dead_letters``, kept ``horizon`` after each was recorded (None: for ever)."""

    horizon: timedelta | None
    table: str = "core.dead_letters"

    async def prune(self, conn: asyncpg.Connection, now: datetime, *, dry_run: bool) -> Pruned:
        if self.horizon is None:
            return Pruned(self.table, held="kept for ever (SPECTRAL_DLQ_RETENTION_MS=-1)")
        cutoff = now - self.horizon
        seconds = self.horizon.total_seconds()
        if dry_run:
            rows = await count(conn, "count dead letters", _SQL["count_dead_letters"], cutoff)
            return Pruned(self.table, rows, seconds)
        rows, more = await delete_in_batches(
            conn, "prune dead letters", _SQL["prune_dead_letters"], cutoff
        )
        return Pruned(self.table, rows, seconds, more=more)


@dataclass(frozen=True)
class Redrives:
    """``core.dlq_redrives``, kept while the dead letter or its redriven copy may be read."""

    describe: DescribeRetention
    grace: timedelta
    table: str = "core.dlq_redrives"

    async def prune(self, conn: asyncpg.Connection, now: datetime, *, dry_run: bool) -> Pruned:
        pairs = await guarded("redrive topics", lambda: conn.fetch(_SQL["redrive_topics"]))
        if not pairs:
            return Pruned(self.table)
        topics = sorted({r["dlq_topic"] for r in pairs} | {r["source_topic"] for r in pairs})
        try:
            broker = await self.describe(topics)
        except SpectralError as exc:
            return Pruned(self.table, held=f"broker unavailable: {exc}"[:300])
        lives = {t.topic: t.readable_for(broker.check_interval_ms) for t in broker.topics}
        total, more, shortest, kept = 0, False, None, []
        for pair in pairs:
            dlq, source = pair["dlq_topic"], pair["source_topic"]
            bounds = [lives.get(dlq), lives.get(source)]
            if any(b is None for b in bounds):
                kept.append(dlq)  # a topic that keeps records for ever (or is unknown)
                continue
            horizon = max(b for b in bounds if b is not None) + self.grace
            shortest = horizon if shortest is None else min(shortest, horizon)
            cutoff = now - horizon
            if pair["oldest"] >= cutoff:
                continue
            if dry_run:
                total += await count(
                    conn, "count redrives", _SQL["count_redrives"], dlq, source, cutoff
                )
                continue
            rows, stopped = await delete_in_batches(
                conn, "prune redrives", _SQL["prune_redrives"], dlq, source, cutoff
            )
            total += rows
            more = more or stopped
        held = (
            f"kept for ever: {', '.join(sorted(set(kept)))} keep records for ever" if kept else None
        )
        return Pruned(
            self.table,
            total,
            shortest.total_seconds() if shortest is not None else None,
            held=held,
            more=more,
        )


@dataclass(frozen=True)
class Tokens:
    """``core.api_tokens`` revoked or expired more than ``horizon`` ago."""

    horizon: timedelta
    table: str = "core.api_tokens"

    async def prune(self, conn: asyncpg.Connection, now: datetime, *, dry_run: bool) -> Pruned:
        cutoff = now - self.horizon
        seconds = self.horizon.total_seconds()
        if dry_run:
            return Pruned(
                self.table, await count(conn, "count tokens", _SQL["count_tokens"], cutoff), seconds
            )
        rows, more = await delete_in_batches(conn, "prune tokens", _SQL["prune_tokens"], cutoff)
        return Pruned(self.table, rows, seconds, more=more)


@dataclass(frozen=True)
class Measured:
    """A table kept by design (never pruned), measured with the others."""

    table: str
    why: str = "kept by design"

    async def prune(self, conn: asyncpg.Connection, now: datetime, *, dry_run: bool) -> Pruned:  # noqa: ARG002 - the task's shape
        return Pruned(self.table, held=self.why)


@dataclass(frozen=True, slots=True)
class TableSize:
    table: str
    rows: int
    """The statistics' estimate of live rows."""
    bytes: int


async def table_sizes(conn: asyncpg.Connection, tables: Sequence[str]) -> list[TableSize]:
    """Rows and bytes of ``tables`` (every partition of a partitioned one)."""
    rows = await guarded("table sizes", lambda: conn.fetch(_SQL["table_sizes"], list(tables)))
    return [TableSize(r["table"], int(r["rows"]), int(r["bytes"])) for r in rows]
