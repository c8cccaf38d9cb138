"""Closing orchestrations (ADR-035 §7.2): a generate-all closes once every child is terminal,
recording its children's outcomes; one that stops on error cancels its unstarted children
when one fails. Each parent in its own transaction, under its project lock (lock order: never
the project lock while holding a target lock — the children's own transactions have ended)."""

from __future__ import annotations

import json
from pathlib import Path
from uuid import UUID

import asyncpg

from producers.work.domain.cancellation import cancel_waiting
from producers.work.domain.identity import project_lock_scope
from producers.work.domain.locks import TransactionLocks
from producers.work.domain.model import ThreadStatus
from producers.work.domain.types import Conn
from spectral.db.queries import load_queries
from spectral.outbox.writer import enqueue

_SQL = load_queries(Path(__file__).with_name("parents.sql"))


class ParentSettlement:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

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
            if parent["cancel_requested_at"] is not None:
                status = ThreadStatus.CANCELED
            elif counts[ThreadStatus.COMPLETE.value] == len(children):
                status = ThreadStatus.COMPLETE
            else:
                status = ThreadStatus.FAILED
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

    @staticmethod
    async def _cancel_siblings(conn: Conn, parent_id: UUID) -> None:
        rows = await conn.fetch(_SQL["cancelable_items"], parent_id)
        if not rows:
            return
        message = "canceled: a sibling failed and the orchestration stops on error"
        canceled, outbox = await cancel_waiting(
            conn, [r["work_item_id"] for r in rows], message, parent_id
        )
        await conn.execute(
            _SQL["cancel_threads"],
            sorted(set(canceled.values())),
            json.dumps({"item_status": "canceled", "reason": "a sibling failed"}),
        )
        await enqueue(conn, outbox)
