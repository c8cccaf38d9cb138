"""Opening work on the ledger, in the caller's transaction: threads, their work items and the
documents they will change (shared by the work commands and by features that enqueue paid work
of their own — the rule stub of a failure cluster, producers/clusters/stub.py).

``open_work`` is the whole of it for a feature with one item per thread: for each request whose
identity has no thread yet (whatever its status — an identity is asked once; a user retry is
the work commands' business), a thread, its document at version 1 (unless it exists) and its
queued item, with the ``work.thread.opened`` and ``work.item.enqueued`` events in the outbox.
The lower-level inserts are the work commands' too (producers/work/repository.py).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from producers.work.domain import events
from producers.work.domain.hashing import content_hash
from producers.work.domain.model import Priority, ThreadStatus
from producers.work.domain.types import Conn
from spectral.db.queries import load_queries
from spectral.outbox.writer import enqueue

_SQL = load_queries(Path(__file__).with_name("queries.sql"))


@dataclass(frozen=True)
class NewThread:
    thread_id: UUID
    kind: str
    space_id: str
    target_ref: Mapping[str, Any]
    status: str
    parent_thread_id: UUID | None
    idempotency_key: str
    continue_on_error: bool = True
    space_type: str = "project"


@dataclass(frozen=True)
class NewItem:
    work_item_id: UUID
    thread_id: UUID
    sequence: int
    lock_scope: str
    project_id: str
    function_key: str
    input: Mapping[str, Any]
    prompt_bytes: int | None = None
    """An upper bound of the UTF-8 length of the item's prompt (its spend is reserved from it)."""


@dataclass(frozen=True)
class NewDocument:
    document_id: str
    doc_type: str
    content: Mapping[str, Any]


@dataclass(frozen=True)
class WorkRequest:
    """One thread with one item (and the document it changes), opened unless its identity has
    a thread already."""

    kind: str
    identity: str
    space_type: str
    space_id: str
    target_ref: Mapping[str, Any]
    function_key: str
    lock_scope: str
    project_id: str
    input: Mapping[str, Any]
    prompt_bytes: int
    document: NewDocument


@dataclass(frozen=True)
class WorkState:
    """The newest thread of an identity and its newest item."""

    thread_id: UUID
    status: ThreadStatus
    created_at: datetime
    item_status: str | None
    attempt: int


async def work_of(conn: Conn, identities: Sequence[str]) -> dict[str, WorkState]:
    rows = await conn.fetch(_SQL["work_of_identities"], sorted(set(identities)))
    return {
        row["idempotency_key"]: WorkState(
            row["thread_id"],
            ThreadStatus(row["status"]),
            row["created_at"],
            row["item_status"],
            row["attempt"] or 0,
        )
        for row in rows
    }


async def open_work(conn: Conn, requests: Sequence[WorkRequest], now: datetime) -> dict[str, UUID]:
    """Open the work of ``requests`` whose identity has no thread yet; returns the thread of
    each identity opened now."""
    known = await work_of(conn, [r.identity for r in requests])
    fresh = [r for r in requests if r.identity not in known]
    if not fresh:
        return {}
    threads = [
        NewThread(
            thread_id=uuid.uuid4(),
            kind=r.kind,
            space_id=r.space_id,
            target_ref=r.target_ref,
            status=ThreadStatus.OPEN.value,
            parent_thread_id=None,
            idempotency_key=r.identity,
            space_type=r.space_type,
        )
        for r in fresh
    ]
    inserted = await insert_threads(conn, threads)
    opened = [(r, t) for r, t in zip(fresh, threads, strict=True) if t.thread_id in inserted]
    for request, _ in opened:
        document = request.document
        await insert_document(
            conn,
            document_id=document.document_id,
            project_id=request.project_id,
            doc_type=document.doc_type,
            content=document.content,
            content_hash=content_hash(document.content),
        )
    items = [
        NewItem(
            work_item_id=uuid.uuid4(),
            thread_id=thread.thread_id,
            sequence=1,
            lock_scope=request.lock_scope,
            project_id=request.project_id,
            function_key=request.function_key,
            input=request.input,
            prompt_bytes=request.prompt_bytes,
        )
        for request, thread in opened
    ]
    await insert_items(conn, items, now)
    outbox = []
    for (_, thread), item in zip(opened, items, strict=True):
        outbox.append(
            events.thread_opened(
                thread_id=thread.thread_id,
                kind=thread.kind,
                space_type=thread.space_type,
                space_id=thread.space_id,
                target_ref=thread.target_ref,
                parent_thread_id=None,
                idempotency_key=thread.idempotency_key,
            )
        )
        outbox.append(
            events.item_enqueued(
                work_item_id=item.work_item_id,
                thread_id=item.thread_id,
                sequence=item.sequence,
                attempt=1,
                lock_scope=item.lock_scope,
                not_before=now,
                kind=thread.kind,
                target_ref=thread.target_ref,
                input_=item.input,
                now=now,
            )
        )
    await enqueue(conn, outbox)
    return {thread.idempotency_key: thread.thread_id for _, thread in opened}


async def insert_threads(conn: Conn, threads: Sequence[NewThread]) -> set[UUID]:
    """Insert; return the ids actually inserted (a live twin makes one lose)."""
    if not threads:
        return set()
    rows = await conn.fetch(
        _SQL["insert_threads"],
        [t.thread_id for t in threads],
        [t.kind for t in threads],
        [t.space_id for t in threads],
        [json.dumps(dict(t.target_ref)) for t in threads],
        [t.status for t in threads],
        [t.parent_thread_id for t in threads],
        [t.idempotency_key for t in threads],
        [t.continue_on_error for t in threads],
        [t.space_type for t in threads],
    )
    return {row["thread_id"] for row in rows}


async def next_sequences(conn: Conn, thread_ids: Sequence[UUID]) -> dict[UUID, int]:
    rows = await conn.fetch(_SQL["next_sequences"], list(thread_ids))
    return {row["thread_id"]: row["next_sequence"] for row in rows}


async def insert_items(
    conn: Conn,
    items: Sequence[NewItem],
    not_before: datetime,
    priority: Priority = Priority.NORMAL,
    delay_seconds: float = 0.0,
) -> None:
    """Insert queued items; they rank ``delay_seconds`` after ``not_before`` (priority.py)."""
    if not items:
        return
    await conn.execute(
        _SQL["insert_items"],
        [i.work_item_id for i in items],
        [i.thread_id for i in items],
        [i.sequence for i in items],
        [i.lock_scope for i in items],
        [i.project_id for i in items],
        [i.function_key for i in items],
        [json.dumps(dict(i.input)) for i in items],
        list(range(len(items))),
        not_before,
        priority.value,
        delay_seconds,
        [i.prompt_bytes for i in items],
    )


async def insert_document(
    conn: Conn,
    *,
    document_id: str,
    project_id: str,
    doc_type: str,
    content: Mapping[str, Any],
    content_hash: str,
) -> bool:
    """Create version 1; False when the document already exists."""
    text = json.dumps(dict(content))
    inserted = await conn.fetchval(
        _SQL["insert_document"], document_id, project_id, doc_type, text, content_hash
    )
    if inserted is None:
        return False
    await conn.execute(_SQL["insert_first_version"], document_id, text, content_hash)
    return True
