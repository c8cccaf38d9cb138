"""The read side of the work domain: thread views, project listings and ledgers.

Read paths never act on a lease: a claimed or running item is shown as in flight (ADR-0023's
"read paths treat pending rows as in-flight"); what a thread *produced* is read from its
ledger and documents, never from the item row's informational ``error_message``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg

from producers.work.domain.model import LedgerEntry, Thread, ThreadStatus, ThreadView
from producers.work.domain.rows import entry_from_row, item_from_row, thread_from_row
from spectral.db.connect import guarded
from spectral.db.queries import load_queries

_SQL = load_queries(Path(__file__).with_name("queries.sql"))


def child_summary(parent: Thread, children: list[Thread]) -> dict[str, int]:
    """Counts by status of a parent's children: live while the parent runs, the outcome it
    recorded once it closed (children adopted later by another orchestration do not rewrite
    a closed parent's record)."""
    recorded = (parent.outcome or {}).get("counts")
    if parent.status.terminal and isinstance(recorded, dict):
        return {str(k): int(v) for k, v in recorded.items()}
    counts = Counter(child.status.value for child in children)
    return {status.value: counts.get(status.value, 0) for status in ThreadStatus}


@dataclass(frozen=True, slots=True)
class SpendPoint:
    """An org's spend in its budget period up to ``at`` (inclusive of its bucket)."""

    at: datetime
    tokens: int
    cost: Decimal


@dataclass(frozen=True, slots=True)
class ProjectBrief:
    """A project as its threads show it."""

    project_id: str
    threads: int
    """Top-level threads (a generate-all's children are not counted)."""
    active: int
    """Of those, open or running."""
    last_thread_at: datetime


@dataclass(frozen=True)
class DocumentView:
    document_id: str
    project_id: str
    doc_type: str
    version: int
    content: Mapping[str, Any]
    updated_at: datetime


class WorkReader:
    """Queries over threads, items and the ledger (any role with SELECT on work.*)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def thread(self, thread_id: UUID) -> ThreadView | None:
        async def run() -> ThreadView | None:
            async with self._pool.acquire() as conn:
                row = await conn.fetchrow(_SQL["get_thread"], thread_id)
                if row is None:
                    return None
                thread = thread_from_row(row)
                items = tuple(
                    item_from_row(r) for r in await conn.fetch(_SQL["thread_items"], thread_id)
                )
                children = [
                    thread_from_row(r) for r in await conn.fetch(_SQL["child_threads"], thread_id)
                ]
            summary = child_summary(thread, children) if children or thread.outcome else None
            return ThreadView(
                thread=thread, items=items, child_summary=summary, children=tuple(children)
            )

        return await guarded("read thread", run)

    async def project_threads(
        self,
        project_id: str,
        *,
        active: bool,
        limit: int = 200,
        after: tuple[datetime, UUID] | None = None,
    ) -> list[Thread]:
        """Newest first; ``after`` = the (created_at, thread_id) of the last thread already seen."""
        after_at, after_id = after or (None, None)

        async def run() -> list[Thread]:
            rows = await self._pool.fetch(
                _SQL["project_threads"], project_id, active, limit, after_at, after_id
            )
            return [thread_from_row(r) for r in rows]

        return await guarded("list project threads", run)

    async def projects(self, *, limit: int = 200) -> list[ProjectBrief]:
        """The projects that have threads, the most recently active first."""

        async def run() -> list[ProjectBrief]:
            rows = await self._pool.fetch(_SQL["projects"], limit)
            return [
                ProjectBrief(r["project_id"], r["threads"], r["active"], r["last_thread_at"])
                for r in rows
            ]

        return await guarded("list projects", run)

    async def spend_over_period(
        self, orgs: Sequence[str] | None = None
    ) -> dict[str, list[SpendPoint]]:
        """Each budgeted org's cumulative spend in its current period, oldest first (per
        minute, hour or day by the period's length; ``orgs`` = only these)."""

        async def run() -> dict[str, list[SpendPoint]]:
            found: dict[str, list[SpendPoint]] = {}
            wanted = None if orgs is None else list(orgs)
            for r in await self._pool.fetch(_SQL["spend_over_period"], wanted):
                point = SpendPoint(r["at"], r["tokens"], r["cost"])
                found.setdefault(r["org_id"], []).append(point)
            return found

        return await guarded("read spend over the period", run)

    async def document(self, document_id: str) -> DocumentView | None:
        async def run() -> DocumentView | None:
            row = await self._pool.fetchrow(_SQL["get_document"], document_id)
            if row is None:
                return None
            return DocumentView(
                document_id=row["document_id"],
                project_id=row["project_id"],
                doc_type=row["doc_type"],
                version=row["version"],
                content=json.loads(row["content"]),
                updated_at=row["updated_at"],
            )

        return await guarded("read document", run)

    async def ledger(self, thread_ids: list[UUID]) -> list[LedgerEntry]:
        async def run() -> list[LedgerEntry]:
            rows = await self._pool.fetch(_SQL["ledger_of_threads"], thread_ids)
            return [entry_from_row(r) for r in rows]

        return await guarded("read ledger", run)

    async def thread_ledger(self, thread_id: UUID) -> list[LedgerEntry] | None:
        """The ledger of a thread and, for an orchestration, of its children."""
        view = await self.thread(thread_id)
        if view is None:
            return None
        return await self.ledger([thread_id, *(child.thread_id for child in view.children)])
