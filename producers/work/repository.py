"""All database work of the commands, on the caller's connection (the command's transaction)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from producers.work.domain import enqueue
from producers.work.domain.enqueue import NewItem, NewThread
from producers.work.domain.model import Priority, Thread
from producers.work.domain.rows import thread_from_row
from producers.work.domain.types import Conn
from spectral.db.queries import load_queries

_SQL = load_queries(Path(__file__).with_name("queries.sql"))


@dataclass(frozen=True)
class StoredDocument:
    document_id: str
    project_id: str
    doc_type: str
    version: int
    content: Mapping[str, Any]
    content_hash: str


class CommandRepository:
    """Threads, work items and documents as the commands see them."""

    async def act_as(self, conn: Conn, principal: str | None) -> None:
        """Record ``principal`` as the acting one of this transaction (threads.requested_by)."""
        if principal is not None:
            await conn.execute(_SQL["act_as"], principal)

    async def latest_threads(self, conn: Conn, identities: Sequence[str]) -> dict[str, Thread]:
        """The thread each identity resolves to (live first, else newest), row-locked."""
        rows = await conn.fetch(_SQL["latest_threads_for_update"], list(identities))
        return {row["idempotency_key"]: thread_from_row(row) for row in rows}

    async def insert_threads(self, conn: Conn, threads: Sequence[NewThread]) -> set[UUID]:
        """Insert; return the ids actually inserted (a live twin makes one lose)."""
        return await enqueue.insert_threads(conn, threads)

    async def reopen_threads(
        self,
        conn: Conn,
        reopen: Sequence[tuple[UUID, str, UUID | None]],
    ) -> set[UUID]:
        """(thread_id, new status, new parent or None) for failed/canceled threads."""
        if not reopen:
            return set()
        rows = await conn.fetch(
            _SQL["reopen_threads"],
            [r[0] for r in reopen],
            [r[1] for r in reopen],
            [r[2] for r in reopen],
        )
        return {row["thread_id"] for row in rows}

    async def adopt_threads(self, conn: Conn, thread_ids: Sequence[UUID], parent_id: UUID) -> None:
        if thread_ids:
            await conn.fetch(_SQL["adopt_threads"], list(thread_ids), parent_id)

    async def next_sequences(self, conn: Conn, thread_ids: Sequence[UUID]) -> dict[UUID, int]:
        return await enqueue.next_sequences(conn, thread_ids)

    async def insert_items(
        self,
        conn: Conn,
        items: Sequence[NewItem],
        not_before: datetime,
        priority: Priority = Priority.NORMAL,
        delay_seconds: float = 0.0,
    ) -> None:
        """Insert queued items; they rank ``delay_seconds`` after ``not_before`` (priority.py)."""
        await enqueue.insert_items(conn, items, not_before, priority, delay_seconds)

    async def close_thread(
        self, conn: Conn, thread_id: UUID, status: str, outcome: Mapping[str, Any]
    ) -> None:
        await conn.execute(_SQL["close_thread"], thread_id, status, json.dumps(dict(outcome)))

    async def document(self, conn: Conn, document_id: str) -> StoredDocument | None:
        row = await conn.fetchrow(_SQL["get_document"], document_id)
        if row is None:
            return None
        return StoredDocument(
            document_id=row["document_id"],
            project_id=row["project_id"],
            doc_type=row["doc_type"],
            version=row["version"],
            content=json.loads(row["content"]),
            content_hash=row["content_hash"],
        )

    async def insert_document(
        self,
        conn: Conn,
        *,
        document_id: str,
        project_id: str,
        doc_type: str,
        content: Mapping[str, Any],
        content_hash: str,
    ) -> bool:
        """Create version 1; False when the document already exists."""
        return await enqueue.insert_document(
            conn,
            document_id=document_id,
            project_id=project_id,
            doc_type=doc_type,
            content=content,
            content_hash=content_hash,
        )
