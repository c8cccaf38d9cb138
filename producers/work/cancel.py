"""Cancelling a thread — one epic's, or a generate-all with its whole tree (the command side).

One transaction, under the project's orchestration lock (ADR-035 §9), acting as the caller's
principal:

1. the thread and, for a generate-all, its live children: their live items are row-locked
   first (in id order, as every writer of items takes them), then the threads;
2. each live thread gets ``cancel_requested_at`` (who, why) and a thread-level ``error`` entry
   in the ledger (kind ``cancel_requested``);
3. items no worker holds — queued, waiting for a retry, parked — end ``canceled`` at once,
   without a call, each with its own ``error`` entry (kind ``canceled``) and event;
4. items a worker holds get ``cancel_requested_at``: the holder ends them ``canceled`` at its
   next step — before a new attempt starts (no call), or when the call in flight answers (the
   answer is recorded in the ledger, it was paid for, and settles its reservation; the
   mutation is not applied). The reservation of an attempt that has not started is released
   here, at once: no attempt can start once the cancellation is asked for, so it is released
   even if its holder is frozen or dead and its lease has not timed out yet;
5. threads with no live item left close ``canceled``; so does the generate-all once every child
   is closed (else the executor closes it when the last in-flight child ends).

Idempotent: cancelling a thread whose cancellation was already asked for, or that is closed,
changes nothing and writes nothing (the answer says which).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from uuid import UUID

import asyncpg

from producers.work.domain import ledger
from producers.work.domain.cancellation import cancel_waiting
from producers.work.domain.identity import project_lock_scope
from producers.work.domain.locks import TransactionLocks
from producers.work.domain.model import (
    WAITING_ITEM_STATUSES,
    EntryType,
    ItemStatus,
    ThreadKind,
    ThreadStatus,
)
from producers.work.domain.payloads import error_payload
from producers.work.domain.types import Conn
from producers.work.repository import CommandRepository
from spectral.db.connect import guarded
from spectral.db.queries import load_queries
from spectral.errors import PermanentError
from spectral.outbox.writer import OutboxItem, enqueue

_SQL = load_queries(Path(__file__).with_name("queries.sql"))

MAX_REASON_CHARS = 500


class UnknownThreadError(PermanentError):
    """No such thread."""


class Disposition(StrEnum):
    CANCELED = "canceled"  # closed now: nothing was in flight
    CANCELING = "canceling"  # asked for; items in flight end canceled when their calls answer
    ALREADY_REQUESTED = "already_requested"
    ALREADY_CLOSED = "already_closed"


@dataclass(frozen=True)
class CancelResult:
    thread_id: UUID
    status: ThreadStatus
    disposition: Disposition
    canceled_items: int = 0
    """Waiting items ended now, without a call."""
    in_flight_items: int = 0
    """Items a worker holds: they end canceled at their holder's next step."""


async def cancel_thread(
    pool: asyncpg.Pool,
    thread_id: UUID,
    *,
    reason: str | None = None,
    requested_by: str | None = None,
    repository: CommandRepository | None = None,
) -> CancelResult:
    """Cancel ``thread_id`` (and its children, for a generate-all): see the module doc."""
    if reason is not None and len(reason) > MAX_REASON_CHARS:
        raise ValueError(f"a cancellation reason holds at most {MAX_REASON_CHARS} characters")
    repo = repository or CommandRepository()

    async def run() -> CancelResult:
        async with pool.acquire() as conn, conn.transaction():
            await repo.act_as(conn, requested_by)
            return await _cancel(conn, thread_id, reason)

    return await guarded("cancel thread", run)


async def _cancel(conn: Conn, thread_id: UUID, reason: str | None) -> CancelResult:
    root = await conn.fetchrow(_SQL["thread_for_cancel"], thread_id)
    if root is None:
        raise UnknownThreadError(f"no thread {thread_id}")
    await TransactionLocks(conn).project(project_lock_scope(root["space_id"]))
    tree = [thread_id]
    if root["kind"] == ThreadKind.STORY_GENERATE_ALL.value:
        tree += [r["thread_id"] for r in await conn.fetch(_SQL["child_ids"], thread_id)]
    items = await conn.fetch(_SQL["live_items_for_cancel"], tree)
    threads = {r["thread_id"]: r for r in await conn.fetch(_SQL["lock_threads_for_cancel"], tree)}
    current = ThreadStatus(threads[thread_id]["status"])
    if current.terminal:
        return CancelResult(thread_id, current, Disposition.ALREADY_CLOSED)
    if threads[thread_id]["cancel_requested_at"] is not None:
        in_flight = sum(1 for i in items if i["status"] in ("claimed", "running"))
        return CancelResult(
            thread_id, current, Disposition.ALREADY_REQUESTED, in_flight_items=in_flight
        )
    live = [t for t, row in threads.items() if ThreadStatus(row["status"]).active]
    requested = await conn.fetch(_SQL["request_cancel"], live, reason)
    outbox: list[OutboxItem] = []
    message = reason or "no reason given"
    entries: list[tuple[ledger.EntryRow, UUID]] = [
        (
            (
                None,
                row["thread_id"],
                0,
                EntryType.ERROR,
                {
                    **error_payload(
                        kind="cancel_requested",
                        reason="canceled",
                        message=f"cancellation requested by {row['actor']}: {message}",
                        disposition="canceled",
                    ),
                    "requested_by": row["actor"],
                },
            ),
            thread_id,
        )
        for row in requested
    ]
    outbox.extend(await ledger.append_cancellations(conn, entries))
    waiting = [i["work_item_id"] for i in items if ItemStatus(i["status"]) in WAITING_ITEM_STATUSES]
    canceled, events = await cancel_waiting(
        conn, waiting, f"canceled before its next attempt started: {message}", thread_id
    )
    outbox.extend(events)
    held = [i["work_item_id"] for i in items if i["status"] in ("claimed", "running")]
    flagged = await conn.fetch(_SQL["flag_leased_items"], held) if held else []
    if flagged:
        await conn.execute(
            _SQL["release_unstarted_spend_of_canceled"], [r["work_item_id"] for r in flagged]
        )
    children = [t for t in live if t != thread_id]
    outcome = json.dumps({"item_status": "canceled", "reason": message})
    closed = {
        r["thread_id"] for r in await conn.fetch(_SQL["close_canceled_threads"], children, outcome)
    }
    if thread_id not in children:
        closed |= {
            r["thread_id"]
            for r in await conn.fetch(
                _SQL["close_canceled_threads"], [thread_id], await _root_outcome(conn, root)
            )
        }
    await enqueue(conn, outbox)
    status = ThreadStatus.CANCELED if thread_id in closed else current
    return CancelResult(
        thread_id,
        status,
        Disposition.CANCELED if thread_id in closed else Disposition.CANCELING,
        canceled_items=len(canceled),
        in_flight_items=len(flagged),
    )


async def _root_outcome(conn: Conn, root: asyncpg.Record) -> str:
    """The outcome a canceled thread records: a generate-all's counts of its children."""
    if root["kind"] != ThreadKind.STORY_GENERATE_ALL.value:
        return json.dumps({"item_status": "canceled"})
    counts = {s.value: 0 for s in ThreadStatus}
    for row in await conn.fetch(_SQL["child_statuses"], root["thread_id"]):
        counts[row["status"]] = row["n"]
    return json.dumps({"status": ThreadStatus.CANCELED.value, "counts": counts})
