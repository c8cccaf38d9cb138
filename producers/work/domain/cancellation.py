"""Ending waiting work items as canceled, with their ledger entries and events (shared by the
cancel command and the executor's stop-on-error orchestration).

An item no worker holds — queued, waiting for a retry, or parked — ends ``canceled`` at once:
no call is made for it. Each gets an ``error`` entry (kind ``canceled``, disposition
``canceled``, the attempt it had reached) and its ``work.item.state_changed`` event (status
``dead_letter`` with ``state: canceled``: the contract's vocabulary is ADR-035's), in the
caller's transaction. Items a worker holds are the holder's to end (it checks
``cancel_requested_at`` at every step).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from uuid import UUID

from producers.work.domain import events, ledger
from producers.work.domain.model import WAITING_ITEM_STATUSES, EntryType, ItemStatus
from producers.work.domain.payloads import error_payload, message_text
from producers.work.domain.types import Conn
from spectral.db.queries import load_queries
from spectral.outbox.writer import OutboxItem

_SQL = load_queries(Path(__file__).with_name("queries.sql"))


async def cancel_waiting(
    conn: Conn, item_ids: Sequence[UUID], message: str, correlation_id: UUID
) -> tuple[dict[UUID, UUID], list[OutboxItem]]:
    """End the items of ``item_ids`` that are waiting; returns {item: its thread} of those
    ended and the events to write to the outbox in the same transaction."""
    if not item_ids:
        return {}, []
    rows = await conn.fetch(
        _SQL["cancel_waiting_items"], sorted(set(item_ids)), message_text(message)
    )
    outbox: list[OutboxItem] = []
    entries: list[tuple[ledger.EntryRow, UUID]] = []
    for row in rows:
        payload = error_payload(
            kind="canceled",
            reason="canceled",
            message=message,
            disposition="canceled",
            attempt=row["attempt"],
        )
        entries.append(
            (
                (row["work_item_id"], row["thread_id"], row["attempt"], EntryType.ERROR, payload),
                correlation_id,
            )
        )
        outbox.append(
            events.item_state_changed(
                work_item_id=row["work_item_id"],
                thread_id=row["thread_id"],
                lock_scope=row["lock_scope"],
                status=ItemStatus.CANCELED,
                attempt=row["attempt"],
                error_message=message,
                correlation_id=correlation_id,
            )
        )
    outbox.extend(await ledger.append_cancellations(conn, entries))
    return {row["work_item_id"]: row["thread_id"] for row in rows}, outbox


async def supersede(conn: Conn, thread_ids: Sequence[UUID], message: str) -> list[OutboxItem]:
    """Cancel the work of threads nobody needs any more (a feature moved on from what they
    were asked for): their waiting items end at once (no call), the items a worker holds are
    asked to end (their holder does, at its next step), and threads with nothing live left
    close canceled — in the caller's transaction. Returns the events to write to its outbox."""
    if not thread_ids:
        return []
    ids = sorted(set(thread_ids))
    live = await conn.fetch(_SQL["lock_live_items_of_threads"], ids)
    waiting = [r["work_item_id"] for r in live if r["status"] in _WAITING]
    held = [r["work_item_id"] for r in live if r["status"] not in _WAITING]
    outbox: list[OutboxItem] = []
    for thread_id in ids:
        mine = [r["work_item_id"] for r in live if r["thread_id"] == thread_id]
        _, ended = await cancel_waiting(
            conn, [item for item in mine if item in waiting], message, thread_id
        )
        outbox.extend(ended)
    if held:
        await conn.execute(_SQL["ask_to_cancel_items"], held)
    await conn.execute(_SQL["close_superseded_threads"], ids, message_text(message))
    return outbox


_WAITING = frozenset(status.value for status in WAITING_ITEM_STATUSES)
