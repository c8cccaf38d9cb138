"""Appending to the ledger (ADR-035 §5.3): one statement for many entries, each made storable,
hashed as stored, and announced by its ``work.ledger.entry_appended`` event.

Every writer of ledger entries — the executor, and the commands that cancel — appends through
``append``, in its own transaction, with the events it returns written to the outbox in that
same transaction. An entry already recorded for its (item, attempt, type) is skipped (the
database's unique index: one prompt, one response, one parse_report and one mutation_report
per attempt); errors are never limited.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

from producers.work.domain import events
from producers.work.domain.hashing import canonical_text, text_hash
from producers.work.domain.model import EntryType
from producers.work.domain.types import Conn
from spectral.db.queries import load_queries
from spectral.db.storable import storable_json
from spectral.outbox.writer import OutboxItem

_SQL = load_queries(Path(__file__).with_name("queries.sql"))

EntryRow = tuple[UUID | None, UUID, int, EntryType, Mapping[str, Any]]
"""(work_item_id or None for a thread-level entry, thread_id, attempt, entry_type, payload)."""


async def append(conn: Conn, rows: Sequence[tuple[EntryRow, UUID]]) -> list[OutboxItem]:
    """Append ``rows`` (each with its correlation id) in one statement, in order. Every payload
    is made storable first (``storable_json``: a text PostgreSQL refuses is escaped, never the
    statement's undoing) and hashed as stored. Returns the events of the entries inserted."""
    if not rows:
        return []
    ids, texts, hashes = _prepared(rows)
    inserted = {
        r["entry_id"]
        for r in await conn.fetch(
            _SQL["insert_entries"],
            ids,
            [row[1] for row, _ in rows],
            [row[0] for row, _ in rows],
            [row[2] for row, _ in rows],
            [row[3].value for row, _ in rows],
            texts,
            hashes,
            list(range(len(rows))),
        )
    }
    return _events(rows, ids, hashes, inserted)


async def append_cancellations(
    conn: Conn, rows: Sequence[tuple[EntryRow, UUID]]
) -> list[OutboxItem]:
    """Append cancellation entries (``error`` entries of kind ``canceled`` or
    ``cancel_requested``) through ``work.append_cancellation_entries``: the roles of commands
    may append those, and no other entry."""
    if not rows:
        return []
    if any(row[3] is not EntryType.ERROR for row, _ in rows):
        raise ValueError("only error entries record a cancellation")
    ids, texts, hashes = _prepared(rows)
    inserted = {
        r["entry_id"]
        for r in await conn.fetch(
            _SQL["append_cancellation_entries"],
            ids,
            [row[1] for row, _ in rows],
            [row[0] for row, _ in rows],
            [row[2] for row, _ in rows],
            texts,
            hashes,
        )
    }
    return _events(rows, ids, hashes, inserted)


def _prepared(rows: Sequence[tuple[EntryRow, UUID]]) -> tuple[list[UUID], list[str], list[str]]:
    ids = [uuid.uuid4() for _ in rows]
    texts = [canonical_text(storable_json(dict(row[4]))) for row, _ in rows]
    return ids, texts, [text_hash(text) for text in texts]


def _events(
    rows: Sequence[tuple[EntryRow, UUID]],
    ids: Sequence[UUID],
    hashes: Sequence[str],
    inserted: set[UUID],
) -> list[OutboxItem]:
    return [
        events.entry_appended(
            entry_id=entry_id,
            thread_id=row[1],
            work_item_id=row[0],
            entry_type=row[3],
            entry_hash=digest,
            correlation_id=correlation_id,
        )
        for entry_id, (row, correlation_id), digest in zip(ids, rows, hashes, strict=True)
        if entry_id in inserted
    ]
