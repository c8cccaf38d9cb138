"""All database work of the executor. Each public method is one transaction (or runs in the
caller's), and writes the outbox events of what it changed in that same transaction."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg

from spectral.db.queries import load_queries
from spectral.outbox import OutboxItem, enqueue
from spectral.work import events
from spectral.work.documents import ReplaceEpicStories, apply_mutation
from spectral.work.hashing import canonical_text, content_hash
from spectral.work.identity import project_lock_scope
from spectral.work.locks import TransactionLocks
from spectral.work.model import EntryType, ItemStatus, LedgerEntry, ThreadStatus, WorkItem
from spectral.work.rows import entry_from_row, item_from_row
from spectral.work.types import Conn

_SQL = load_queries(Path(__file__).with_name("queries.sql"))


class LeaseLostError(Exception):
    """The lease was re-claimed by another worker: this one must stop touching the item."""


@dataclass(frozen=True)
class LoadedItem:
    item: WorkItem
    thread_kind: str
    parent_thread_id: UUID | None
    target_ref: Mapping[str, Any]
    entries: tuple[LedgerEntry, ...]

    @property
    def correlation_id(self) -> UUID:
        return self.parent_thread_id or self.item.thread_id


@dataclass(frozen=True)
class NewEntry:
    attempt: int
    entry_type: EntryType
    payload: Mapping[str, Any]


@dataclass(frozen=True)
class StoredDocument:
    document_id: str
    version: int
    content: Mapping[str, Any]


@dataclass(frozen=True)
class Applied:
    mutation_id: UUID
    base_version: int
    result_version: int


class ExecutorRepository:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    # -- claims (ADR-0023 lease) ----------------------------------------------------------------

    async def claim_delivered(
        self, conn: Conn, item_ids: Sequence[UUID], token: UUID, worker: str
    ) -> list[UUID]:
        rows = await conn.fetch(_SQL["claim_delivered"], list(item_ids), token, worker)
        return [row["work_item_id"] for row in rows]

    async def claim_due(
        self, limit: int, token: UUID, worker: str, grace_seconds: float
    ) -> list[UUID]:
        rows = await self._pool.fetch(_SQL["claim_due"], limit, token, worker, grace_seconds)
        return [row["work_item_id"] for row in rows]

    async def recover_stale(
        self, timeout_seconds: float, limit: int, token: UUID, worker: str
    ) -> list[UUID]:
        rows = await self._pool.fetch(_SQL["recover_stale"], timeout_seconds, limit, token, worker)
        return [row["work_item_id"] for row in rows]

    # -- reads ------------------------------------------------------------------------------------

    async def load(self, item_id: UUID) -> LoadedItem | None:
        async with self._pool.acquire() as conn:
            row = await conn.fetchrow(_SQL["load_item"], item_id)
            if row is None:
                return None
            entries = await conn.fetch(_SQL["item_ledger"], item_id)
        return LoadedItem(
            item=item_from_row(row),
            thread_kind=row["thread_kind"],
            parent_thread_id=row["parent_thread_id"],
            target_ref=json.loads(row["target_ref"]),
            entries=tuple(entry_from_row(e) for e in entries),
        )

    async def document(self, document_id: str) -> StoredDocument | None:
        row = await self._pool.fetchrow(_SQL["get_document"], document_id)
        if row is None:
            return None
        return StoredDocument(row["document_id"], row["version"], json.loads(row["content"]))

    async def queue_depth(self) -> dict[str, int]:
        rows = await self._pool.fetch(_SQL["queue_depth"])
        return {row["status"]: row["items"] for row in rows}

    async def parents_to_settle(self, limit: int) -> list[tuple[UUID, str]]:
        rows = await self._pool.fetch(_SQL["parents_to_settle"], limit)
        return [(row["thread_id"], row["space_id"]) for row in rows]

    # -- the lease holder's transitions ---------------------------------------------------------

    async def start_attempt(
        self, loaded: LoadedItem, token: UUID, attempt: int, prompt: Mapping[str, Any]
    ) -> None:
        """Count attempt ``attempt`` and record its prompt, committed before the paid call."""
        item = loaded.item
        async with self._pool.acquire() as conn, conn.transaction():
            started = await conn.fetchval(
                _SQL["start_attempt"], item.work_item_id, token, attempt - 1
            )
            if started is None:
                raise LeaseLostError
            outbox = await self._append(conn, loaded, [NewEntry(attempt, EntryType.PROMPT, prompt)])
            outbox.append(self._state(loaded, ItemStatus.RUNNING, attempt))
            await enqueue(conn, outbox)

    async def record_response(
        self, loaded: LoadedItem, attempt: int, response: Mapping[str, Any]
    ) -> None:
        """Record a paid answer at once — whether or not the lease is still ours (paid work is
        never dropped; a re-claimer finds and reuses it)."""
        async with self._pool.acquire() as conn, conn.transaction():
            outbox = await self._append(
                conn, loaded, [NewEntry(attempt, EntryType.RESPONSE, response)]
            )
            await enqueue(conn, outbox)

    async def release_for_retry(
        self,
        loaded: LoadedItem,
        token: UUID,
        attempt: int,
        error: Mapping[str, Any],
        backoff: timedelta,
    ) -> datetime:
        """Attempt ``attempt`` failed transiently: record why, wait ``backoff`` (from the
        database clock), and schedule the next attempt's delivery for then."""
        item = loaded.item
        async with self._pool.acquire() as conn, conn.transaction():
            now: datetime = await conn.fetchval(_SQL["db_now"])
            not_before = now + backoff
            payload = {**error, "not_before": not_before.isoformat()}
            released = await conn.fetchval(
                _SQL["release_for_retry"],
                item.work_item_id,
                token,
                not_before,
                str(error.get("message", ""))[:2000],
            )
            if released is None:
                raise LeaseLostError
            outbox = await self._append(conn, loaded, [NewEntry(attempt, EntryType.ERROR, payload)])
            outbox.append(
                self._state(loaded, ItemStatus.FAILED, attempt, str(error.get("message", "")))
            )
            outbox.append(
                events.item_enqueued(
                    work_item_id=item.work_item_id,
                    thread_id=item.thread_id,
                    sequence=item.sequence,
                    attempt=attempt + 1,
                    lock_scope=item.lock_scope,
                    not_before=not_before,
                    kind=loaded.thread_kind,
                    target_ref=loaded.target_ref,
                    input_=item.input,
                    correlation_id=loaded.correlation_id,
                    now=now,
                )
            )
            await enqueue(conn, outbox)
        return not_before

    async def dead_letter(
        self,
        loaded: LoadedItem,
        token: UUID,
        attempt: int,
        error: Mapping[str, Any],
        extra: Sequence[NewEntry] = (),
    ) -> None:
        """The item ends in dead_letter with an ``error`` entry (after ``extra`` entries, e.g.
        the failed parse_report); its thread fails. The parent is settled separately."""
        item = loaded.item
        message = str(error.get("message", ""))
        async with self._pool.acquire() as conn, conn.transaction():
            ended = await conn.fetchval(
                _SQL["dead_letter_item"], item.work_item_id, token, message[:2000]
            )
            if ended is None:
                raise LeaseLostError
            entries = [*extra, NewEntry(attempt, EntryType.ERROR, error)]
            outbox = await self._append(conn, loaded, entries)
            outbox.append(self._state(loaded, ItemStatus.DEAD_LETTER, attempt, message))
            outcome = {"work_item_id": str(item.work_item_id), "item_status": "dead_letter"}
            await conn.fetchval(
                _SQL["close_thread"], item.thread_id, ThreadStatus.FAILED.value, json.dumps(outcome)
            )
            await enqueue(conn, outbox)

    async def apply(
        self,
        loaded: LoadedItem,
        token: UUID,
        mutation: ReplaceEpicStories,
        response_attempt: int,
        parse_payload: Mapping[str, Any],
    ) -> Applied:
        """Under the target lock: apply the mutation (idempotent by its id), record
        parse_report and mutation_report, mark the item applied and its thread complete."""
        item = loaded.item
        async with self._pool.acquire() as conn, conn.transaction():
            locks = TransactionLocks(conn)
            await locks.target(item.lock_scope)
            if await conn.fetchval(_SQL["touch_lease"], item.work_item_id, token) is None:
                raise LeaseLostError
            row = await conn.fetchrow(_SQL["lock_document"], mutation.document_id)
            if row is None:
                raise LookupError(f"document {mutation.document_id!r} is gone")
            base = int(row["version"])
            content = apply_mutation(json.loads(row["content"]), mutation)  # may raise Invalid…
            inserted = await conn.fetchval(
                _SQL["insert_mutation"],
                mutation.mutation_id,
                item.work_item_id,
                item.thread_id,
                mutation.document_id,
                item.lock_scope,
                mutation.operation,
                canonical_text(mutation.arguments()),
                base,
            )
            result = base
            if inserted is not None:  # not applied before (a mutation id is applied once)
                text = canonical_text(content)
                digest = content_hash(content)
                result = await conn.fetchval(
                    _SQL["update_document"], mutation.document_id, base, text, digest
                )
                await conn.execute(
                    _SQL["insert_document_version"],
                    mutation.document_id,
                    result,
                    text,
                    digest,
                    mutation.mutation_id,
                )
            report = {
                "mutation_id": str(mutation.mutation_id),
                "document_id": mutation.document_id,
                "epic_id": mutation.epic_id,
                "operation": mutation.operation,
                "base_version": base,
                "result_version": result,
                "already_applied": inserted is None,
                "story_count": len(mutation.stories),
                "lock_scope": item.lock_scope,
            }
            outbox = await self._append(
                conn,
                loaded,
                [
                    NewEntry(response_attempt, EntryType.PARSE_REPORT, parse_payload),
                    NewEntry(response_attempt, EntryType.MUTATION_REPORT, report),
                ],
            )
            await conn.fetchval(_SQL["mark_applied"], item.work_item_id, token)
            outbox.append(self._state(loaded, ItemStatus.APPLIED, response_attempt))
            outcome = {
                "work_item_id": str(item.work_item_id),
                "item_status": "applied",
                "mutation_id": str(mutation.mutation_id),
                "document_version": result,
            }
            await conn.fetchval(
                _SQL["close_thread"],
                item.thread_id,
                ThreadStatus.COMPLETE.value,
                json.dumps(outcome),
            )
            await enqueue(conn, outbox)
        return Applied(mutation.mutation_id, base, result)

    # -- orchestration (project lock) -------------------------------------------------------------

    async def parent_needs_settling(self, parent_id: UUID) -> bool:
        return bool(await self._pool.fetchval(_SQL["parent_needs_settling"], parent_id))

    async def settle_parent(self, parent_id: UUID, project_id: str) -> ThreadStatus | None:
        """Under the project lock: cancel the unstarted siblings of a failed child when the
        parent stops on error; close the parent, recording its children's outcomes, once every
        child is terminal. Returns the parent's new status, or None if it stays open."""
        async with self._pool.acquire() as conn, conn.transaction():
            locks = TransactionLocks(conn)
            await locks.project(project_lock_scope(project_id))
            parent = await conn.fetchrow(_SQL["lock_parent"], parent_id)
            if parent is None or parent["status"] not in ("open", "running"):
                return None
            children = await conn.fetch(_SQL["children_of"], parent_id)
            failed = any(c["status"] in ("failed", "canceled") for c in children)
            if failed and not parent["continue_on_error"]:
                await self._cancel_siblings(conn, parent_id)
                children = await conn.fetch(_SQL["children_of"], parent_id)
            if any(c["status"] in ("open", "running") for c in children):
                return None
            counts = {s.value: 0 for s in ThreadStatus}
            for child in children:
                counts[child["status"]] += 1
            status = (
                ThreadStatus.COMPLETE
                if counts[ThreadStatus.COMPLETE.value] == len(children)
                else ThreadStatus.FAILED
            )
            outcome = {
                "status": status.value,
                "counts": counts,
                "continue_on_error": parent["continue_on_error"],
                "children": {
                    str(c["thread_id"]): {"epic_id": c["epic_id"], "status": c["status"]}
                    for c in children
                },
            }
            await conn.execute(_SQL["close_parent"], parent_id, status.value, json.dumps(outcome))
            return status

    async def _cancel_siblings(self, conn: Conn, parent_id: UUID) -> None:
        rows = await conn.fetch(_SQL["cancelable_items"], parent_id)
        if not rows:
            return
        message = "canceled: a sibling failed and the orchestration stops on error"
        canceled = await conn.fetch(
            _SQL["cancel_items"], [r["work_item_id"] for r in rows], message
        )
        ids = {r["work_item_id"] for r in canceled}
        outbox: list[OutboxItem] = []
        entries: list[tuple[UUID, UUID, int, Mapping[str, Any]]] = []
        for r in rows:
            if r["work_item_id"] not in ids:
                continue
            payload = {
                "kind": "canceled",
                "reason": "canceled",
                "message": message,
                "disposition": "dead_letter",
            }
            entries.append((r["work_item_id"], r["thread_id"], r["attempt"], payload))
            outbox.append(
                events.item_state_changed(
                    work_item_id=r["work_item_id"],
                    thread_id=r["thread_id"],
                    lock_scope=r["lock_scope"],
                    status=ItemStatus.DEAD_LETTER,
                    attempt=r["attempt"],
                    error_message=message,
                    correlation_id=parent_id,
                )
            )
        outbox.extend(await self._insert_entries(conn, entries, EntryType.ERROR, parent_id))
        await conn.execute(
            _SQL["cancel_threads"],
            sorted({r["thread_id"] for r in canceled}),
            json.dumps({"item_status": "dead_letter", "reason": "canceled"}),
        )
        await enqueue(conn, outbox)

    # -- ledger ---------------------------------------------------------------------------------

    async def _append(
        self, conn: Conn, loaded: LoadedItem, entries: Sequence[NewEntry]
    ) -> list[OutboxItem]:
        item = loaded.item
        rows = [(item.work_item_id, item.thread_id, e.attempt, e.payload) for e in entries]
        types = [e.entry_type for e in entries]
        return await self._insert_typed(conn, rows, types, loaded.correlation_id)

    async def _insert_entries(
        self,
        conn: Conn,
        rows: Sequence[tuple[UUID, UUID, int, Mapping[str, Any]]],
        entry_type: EntryType,
        correlation_id: UUID,
    ) -> list[OutboxItem]:
        return await self._insert_typed(conn, rows, [entry_type] * len(rows), correlation_id)

    async def _insert_typed(
        self,
        conn: Conn,
        rows: Sequence[tuple[UUID, UUID, int, Mapping[str, Any]]],
        types: Sequence[EntryType],
        correlation_id: UUID,
    ) -> list[OutboxItem]:
        """Append entries in one statement; an entry already recorded for its (item, attempt,
        type) is skipped. Returns the ``entry_appended`` events of those inserted."""
        if not rows:
            return []
        ids = [uuid.uuid4() for _ in rows]
        hashes = [content_hash(dict(payload)) for *_, payload in rows]
        inserted = {
            r["entry_id"]
            for r in await conn.fetch(
                _SQL["insert_entries"],
                ids,
                [thread for _, thread, _, _ in rows],
                [item for item, _, _, _ in rows],
                [attempt for _, _, attempt, _ in rows],
                [t.value for t in types],
                [canonical_text(dict(payload)) for *_, payload in rows],
                hashes,
                list(range(len(rows))),
            )
        }
        return [
            events.entry_appended(
                entry_id=entry_id,
                thread_id=row[1],
                work_item_id=row[0],
                entry_type=entry_type,
                entry_hash=digest,
                correlation_id=correlation_id,
            )
            for entry_id, row, entry_type, digest in zip(ids, rows, types, hashes, strict=True)
            if entry_id in inserted
        ]

    @staticmethod
    def _state(
        loaded: LoadedItem, status: ItemStatus, attempt: int, message: str | None = None
    ) -> OutboxItem:
        item = loaded.item
        return events.item_state_changed(
            work_item_id=item.work_item_id,
            thread_id=item.thread_id,
            lock_scope=item.lock_scope,
            status=status,
            attempt=attempt,
            error_message=message,
            correlation_id=loaded.correlation_id,
        )
