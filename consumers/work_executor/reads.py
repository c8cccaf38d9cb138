"""What the executor reads: the items of a batch with their ledgers and documents, the queue's
gauges, the orchestrations to settle. No transition is written here (transitions.py does, and
parents.py closes orchestrations)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg

from producers.work.domain.documents import StoredDocument
from producers.work.domain.model import LedgerEntry, WorkItem
from producers.work.domain.rows import entry_from_row, item_from_row
from producers.work.domain.types import Conn
from spectral.db.queries import load_queries

_SQL = load_queries(Path(__file__).with_name("reads.sql"))


@dataclass(frozen=True)
class LoadedItem:
    item: WorkItem
    thread_kind: str
    parent_thread_id: UUID | None
    target_ref: Mapping[str, Any]
    entries: tuple[LedgerEntry, ...]
    reserved: bool = False
    """The spend of the item's next attempt is reserved (by the claim that leased it)."""

    @property
    def correlation_id(self) -> UUID:
        return self.parent_thread_id or self.item.thread_id


@dataclass(frozen=True)
class LoadedBatch:
    items: Mapping[UUID, LoadedItem]
    documents: Mapping[str, StoredDocument]
    """The documents the items name (``input.document_id``) that exist."""


class ExecutorReads:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    @staticmethod
    async def waiting_items(conn: Conn, item_ids: Sequence[UUID]) -> set[UUID]:
        """Which of these items still wait for a claim (queued, retry-waiting or parked)."""
        rows = await conn.fetch(_SQL["waiting_items"], list(item_ids))
        return {row["work_item_id"] for row in rows}

    async def load_batch(self, item_ids: Sequence[UUID]) -> LoadedBatch:
        """The items with their threads and ledgers, and the documents they name: at most three
        statements for the whole batch (the ledger is read only for items that started an
        attempt before — an item at attempt 0 has no entries)."""
        async with self._pool.acquire() as conn:
            rows = await conn.fetch(_SQL["load_items"], list(dict.fromkeys(item_ids)))
            started = [row["work_item_id"] for row in rows if row["attempt"] > 0]
            by_item: dict[UUID, list[LedgerEntry]] = defaultdict(list)
            if started:
                for entry in await conn.fetch(_SQL["items_ledger"], started):
                    by_item[entry["work_item_id"]].append(entry_from_row(entry))
            items = {
                row["work_item_id"]: LoadedItem(
                    item=item_from_row(row),
                    thread_kind=row["thread_kind"],
                    parent_thread_id=row["parent_thread_id"],
                    target_ref=json.loads(row["target_ref"]),
                    entries=tuple(by_item.get(row["work_item_id"], ())),
                    reserved=row["reserved"],
                )
                for row in rows
            }
            wanted = sorted({str(i.item.input.get("document_id", "")) for i in items.values()})
            documents = {
                row["document_id"]: StoredDocument(
                    row["document_id"], row["version"], json.loads(row["content"]), row["doc_type"]
                )
                for row in (await conn.fetch(_SQL["get_documents"], wanted) if wanted else ())
            }
        return LoadedBatch(items, documents)

    async def load(self, item_id: UUID) -> LoadedItem | None:
        return (await self.load_batch([item_id])).items.get(item_id)

    async def load_bare(self, item_id: UUID) -> LoadedItem | None:
        """The item with its thread links only — no input, target or ledger read: enough to end
        an item whose full load fails (a dead letter)."""
        row = await self._pool.fetchrow(_SQL["load_bare_item"], item_id)
        if row is None:
            return None
        return LoadedItem(item_from_row(row), row["thread_kind"], row["parent_thread_id"], {}, ())

    async def oldest_lease_age(self) -> float:
        return float(await self._pool.fetchval(_SQL["oldest_lease_age"]))

    async def unknown_outcome_spend(self) -> tuple[int, int]:
        """(calls, reserved tokens) of the reservations whose call's outcome is unknown."""
        row = await self._pool.fetchrow(_SQL["unknown_outcome_spend"])
        return (row["calls"], row["tokens"]) if row is not None else (0, 0)

    async def queue_depth(self) -> dict[str, int]:
        rows = await self._pool.fetch(_SQL["queue_depth"])
        return {row["status"]: row["items"] for row in rows}

    async def parents_to_settle(self, limit: int) -> list[tuple[UUID, str]]:
        """Orchestrations left open with nothing live (or stopped on error): the sweep's."""
        rows = await self._pool.fetch(_SQL["parents_to_settle"], limit)
        return [(row["thread_id"], row["space_id"]) for row in rows]

    async def parents_needing_settling(self, parent_ids: Sequence[UUID]) -> list[tuple[UUID, str]]:
        """Of ``parent_ids``, the orchestrations to settle now (one statement)."""
        if not parent_ids:
            return []
        rows = await self._pool.fetch(_SQL["parents_needing_settling"], sorted(set(parent_ids)))
        return [(row["thread_id"], row["space_id"]) for row in rows]
