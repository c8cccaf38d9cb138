"""The transitions of leased work items, set-based over the items of a batch.

``write`` is ONE transaction for whatever a batch records at one step — the starts of its
attempts, the responses that came in, the mutations of the answers it validated, its retries
and dead letters — with one statement per kind of change whatever the number of items, and the
outbox events of what it changed in the same transaction. Every change that belongs to a lease
holder is guarded by the item's lease token, item by item (``work.held_items``, one SQL
function): an item whose lease was lost is left untouched (and reported in
``BatchWritten.lost``) while the others of the batch go on. Responses are the exception: they
are recorded whoever holds the lease (paid work is never dropped), and each settles its
attempt's spend reservation from the usage it reports, in the same transaction — a bill within
its reservation ends its route's probation, an overrun begins it again (schedule.py).

Mutations are applied under the target locks and the document row locks, each document's in
turn by the work function of its document type (mutations.py plans them, purely).

Cancellation: every transition of a lease holder is also guarded by "nobody asked to cancel the
item". An item whose cancellation was asked for is ended ``canceled`` by its holder instead, in
the same transaction (no attempt started; an answer in flight is recorded but its mutation is
not applied). Spend: when a lease ends, the reservations of attempts that never started are
released; a failed attempt's is released (the provider answered it did not do the call) or kept
as ``unknown`` (counted in full).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg

from consumers.work_executor.mutations import MutationApplied, MutationPlan, plan_mutations
from consumers.work_executor.overruns import Overrun, OverrunPolicy, overrun_of
from consumers.work_executor.reads import LoadedItem
from producers.work.domain import events, ledger
from producers.work.domain.functions import Functions, Mutation
from producers.work.domain.hashing import canonical_text
from producers.work.domain.locks import TransactionLocks
from producers.work.domain.model import EntryType, ItemStatus, ThreadStatus
from producers.work.domain.payloads import (
    error_payload,
    message_text,
    mutation_report_payload,
    usage_counts,
)
from producers.work.domain.types import Conn
from spectral.db.queries import load_queries
from spectral.errors import PermanentError
from spectral.outbox.writer import OutboxItem, enqueue

_SQL = load_queries(Path(__file__).with_name("transitions.sql"))
_PROBATION = load_queries(Path(__file__).with_name("probation.sql"))
_OUTCOMES = load_queries(Path(__file__).with_name("outcomes.sql"))


class LeaseLostError(PermanentError):
    """The lease was re-claimed by another worker: this one must stop touching the item."""


@dataclass(frozen=True)
class NewEntry:
    attempt: int
    entry_type: EntryType
    payload: Mapping[str, Any]


# -- what one ``write`` records -----------------------------------------------------------------


@dataclass(frozen=True)
class AttemptStart:
    """Count attempt ``attempt`` (if the item is still at ``attempt - 1``) and record its
    prompt: committed before the paid call."""

    loaded: LoadedItem
    token: UUID
    attempt: int
    prompt: Mapping[str, Any]
    reissue: Mapping[str, Any] | None = None
    """Not a new attempt: attempt ``attempt``'s unknown call is sent again under its idempotency
    key (if the item is still at ``attempt``); this ``error`` payload (disposition ``reissue``)
    records it, and ``prompt`` is the attempt's recorded one."""


@dataclass(frozen=True)
class UnknownReleased:
    """A reservation left ``unknown`` released at the horizon."""

    work_item_id: UUID
    attempt: int
    org_id: str | None
    model: str | None
    tokens: int
    cost: Decimal


@dataclass(frozen=True)
class ResponseRecord:
    """A paid answer, recorded whether or not the lease is still held (and kept in the
    response journal until it is)."""

    work_item_id: UUID
    thread_id: UUID
    correlation_id: UUID
    attempt: int
    payload: dict[str, Any]

    @classmethod
    def of(cls, loaded: LoadedItem, attempt: int, payload: dict[str, Any]) -> ResponseRecord:
        item = loaded.item
        return cls(item.work_item_id, item.thread_id, loaded.correlation_id, attempt, payload)


@dataclass(frozen=True)
class MutationApply:
    """Under the target lock: apply the mutation (idempotent by its id), record parse_report
    and mutation_report, mark the item applied and its thread complete."""

    loaded: LoadedItem
    token: UUID
    mutation: Mutation
    attempt: int
    parse_payload: Mapping[str, Any]

    @property
    def item_id(self) -> UUID:
        return self.loaded.item.work_item_id

    @property
    def lock_scope(self) -> str:
        return self.loaded.item.lock_scope


class SpendOutcome(StrEnum):
    """What a failed attempt's spend reservation becomes."""

    RELEASED = "released"  # the provider answered that it did not do the call: not charged
    UNKNOWN = "unknown"  # no answer (timeout, dropped connection, worker died): counted in full


@dataclass(frozen=True)
class RetryRelease:
    """Attempt ``attempt`` failed transiently: record why, wait ``backoff`` (database clock) and
    schedule the next attempt's delivery for then. ``pause``: (model, seconds) a gateway asked
    every caller of the model to wait (429 + Retry-After)."""

    loaded: LoadedItem
    token: UUID
    attempt: int
    error: Mapping[str, Any]
    backoff: timedelta
    spend: SpendOutcome | None = None
    pause: tuple[str, float] | None = None


@dataclass(frozen=True)
class DeadLetterEnd:
    """The item ends in dead_letter with an ``error`` entry (after ``extra`` entries, e.g. the
    failed parse_report); its thread fails. The parent is settled separately."""

    loaded: LoadedItem
    token: UUID
    attempt: int
    error: Mapping[str, Any]
    extra: tuple[NewEntry, ...] = ()
    spend: SpendOutcome | None = None


@dataclass(frozen=True)
class CancelEnd:
    """The item's cancellation was asked for: it ends ``canceled`` with an ``error`` entry
    (kind ``canceled``); its thread closes canceled. ``spend``: its current attempt's call, if
    one ran and never answered."""

    loaded: LoadedItem
    token: UUID
    attempt: int
    message: str
    spend: SpendOutcome | None = None


@dataclass(frozen=True)
class Requeue:
    """Hand the lease back without starting an attempt (no spend was reserved for one)."""

    loaded: LoadedItem
    token: UUID


@dataclass(frozen=True)
class Settlement:
    """A paid attempt's spend, settled from its response's usage."""

    work_item_id: UUID
    attempt: int
    org_id: str | None
    model: str | None
    function_key: str
    tokens: int
    cost: Decimal
    prompt_tokens: int | None
    completion_tokens: int | None
    overrun: Overrun | None = None
    """What the provider billed beyond the reservation (a provider overrun), if anything."""


@dataclass(frozen=True)
class RouteFeedback:
    """A route's state after the overruns of a write were fed back to it."""

    model: str
    reserve_ratio: Decimal
    suspended: bool


@dataclass(frozen=True)
class BatchWrite:
    starts: Sequence[AttemptStart] = ()
    responses: Sequence[ResponseRecord] = ()
    applies: Sequence[MutationApply] = ()
    releases: Sequence[RetryRelease] = ()
    dead_letters: Sequence[DeadLetterEnd] = ()
    cancels: Sequence[CancelEnd] = ()
    requeues: Sequence[Requeue] = ()


@dataclass
class BatchWritten:
    """What ``write`` did, per item."""

    started: set[UUID] = field(default_factory=set)
    applied: dict[UUID, MutationApplied] = field(default_factory=dict)
    refused: dict[UUID, str] = field(default_factory=dict)
    """Mutations the document refused (or whose document is gone): nothing was written for
    them; the caller dead-letters them."""
    released: dict[UUID, datetime] = field(default_factory=dict)
    """Items released for a retry, with the time their next attempt is due."""
    dead_lettered: set[UUID] = field(default_factory=set)
    canceled: set[UUID] = field(default_factory=set)
    """Items ended canceled (asked for, or found asked for by a guarded transition)."""
    requeued: set[UUID] = field(default_factory=set)
    lost: set[UUID] = field(default_factory=set)
    """Items whose lease was lost: nothing of theirs was written (but responses)."""
    settled: list[Settlement] = field(default_factory=list)
    routes: list[RouteFeedback] = field(default_factory=list)
    """Routes whose provider overran a reservation settled by this write, as they are now."""

    def merge(self, other: BatchWritten) -> None:
        self.started |= other.started
        self.applied.update(other.applied)
        self.refused.update(other.refused)
        self.released.update(other.released)
        self.dead_lettered |= other.dead_lettered
        self.canceled |= other.canceled
        self.requeued |= other.requeued
        self.lost |= other.lost
        self.settled.extend(other.settled)
        self.routes.extend(other.routes)


@dataclass
class _Changes:
    """What one transaction appends: ledger rows, thread closings, outbox events."""

    entries: list[tuple[LoadedItem, NewEntry]] = field(default_factory=list)
    rows: list[tuple[ledger.EntryRow, UUID]] = field(default_factory=list)
    """Entries of items not loaded here (responses), each with its correlation id."""
    closings: list[tuple[UUID, ThreadStatus, Mapping[str, Any]]] = field(default_factory=list)
    states: list[OutboxItem] = field(default_factory=list)
    others: list[OutboxItem] = field(default_factory=list)
    ended: set[UUID] = field(default_factory=set)
    """Items whose lease ended in this transaction (their unstarted reservations go)."""
    attempt_spend: list[tuple[UUID, int, SpendOutcome]] = field(default_factory=list)
    diverted: list[CancelEnd] = field(default_factory=list)
    """Items a guarded transition left alone: ended canceled if their cancellation was asked
    for, else their lease was lost."""


class Transitions:
    """The transitions of leased items: ``write`` (one transaction per call) and the stale-lease
    recovery."""

    def __init__(
        self, pool: asyncpg.Pool, functions: Functions, overruns: OverrunPolicy | None = None
    ) -> None:
        self._pool = pool
        self._functions = functions
        self._overruns = overruns or OverrunPolicy()

    # -- claims (ADR-0023 lease) ----------------------------------------------------------------

    async def recover_stale(
        self,
        timeout_seconds: float,
        limit: int,
        token: UUID,
        worker: str,
        exclude: Sequence[UUID] = (),
    ) -> list[UUID]:
        """Re-stamp stale leases (ADR-0023 recovery), except those of ``exclude`` — the items
        this process is still driving (e.g. waiting out a database outage with their paid
        answers in hand): they are not stale to their holder."""
        rows = await self._pool.fetch(
            _SQL["recover_stale"], timeout_seconds, limit, token, worker, list(exclude)
        )
        return [row["work_item_id"] for row in rows]

    # -- the lease holder's transitions ---------------------------------------------------------

    async def write(self, batch: BatchWrite) -> BatchWritten:
        """Record ``batch`` in one transaction (see the module docstring)."""
        done = BatchWritten()
        changes = _Changes()
        async with self._pool.acquire() as conn, conn.transaction():
            if batch.applies:
                await self._apply(conn, batch.applies, done, changes)
            if batch.starts:
                await self._start(conn, batch.starts, done, changes)
            if batch.responses:
                await self._responses(conn, batch.responses, done, changes)
            if batch.releases:
                await self._release(conn, batch.releases, done, changes)
            if batch.dead_letters:
                await self._dead_letter(conn, batch.dead_letters, done, changes)
            if batch.requeues:
                await self._requeue(conn, batch.requeues, done, changes)
            cancels = [*batch.cancels, *await self._diverted(conn, changes.diverted, done)]
            if cancels:
                await self._cancel(conn, cancels, done, changes)
            await self._spend_after(conn, changes)
            outbox = await ledger.append(
                conn,
                [*(_row(loaded, entry) for loaded, entry in changes.entries), *changes.rows],
            )
            if changes.closings:
                closings = sorted(changes.closings, key=lambda c: c[0])
                await conn.execute(
                    _SQL["close_threads"],
                    [thread for thread, _, _ in closings],
                    [status.value for _, status, _ in closings],
                    [json.dumps(outcome) for _, _, outcome in closings],
                )
            await enqueue(conn, [*outbox, *changes.states, *changes.others])
        return done

    async def _responses(
        self,
        conn: Conn,
        responses: Sequence[ResponseRecord],
        done: BatchWritten,
        changes: _Changes,
    ) -> None:
        """Record paid answers (whoever holds the lease) and settle their attempts' spend."""
        for response in responses:
            changes.rows.append(
                (
                    (
                        response.work_item_id,
                        response.thread_id,
                        response.attempt,
                        EntryType.RESPONSE,
                        response.payload,
                    ),
                    response.correlation_id,
                )
            )
        usage = [_usage(response.payload) for response in responses]
        rows = await conn.fetch(
            _SQL["settle_spend"],
            [r.work_item_id for r in responses],
            [r.attempt for r in responses],
            [u[0] for u in usage],
            [u[1] for u in usage],
        )
        settled = [
            Settlement(
                work_item_id=row["work_item_id"],
                attempt=row["attempt"],
                org_id=row["org_id"],
                model=row["model"],
                function_key=row["function_key"],
                tokens=row["tokens"],
                cost=row["cost"],
                prompt_tokens=row["prompt_tokens"],
                completion_tokens=row["completion_tokens"],
                overrun=overrun_of(
                    tokens=row["tokens"],
                    cost=row["cost"],
                    reserved_tokens=row["reserved_tokens"],
                    reserved_cost=row["reserved_cost"],
                    reserve_ratio=row["reserve_ratio"],
                ),
            )
            for row in rows
        ]
        done.settled.extend(settled)
        proven = sorted({s.model for s in settled if s.model and s.overrun is None})
        if proven:
            await conn.execute(_PROBATION["end_probation"], proven)
        overran = [(s.model, s.overrun) for s in settled if s.model and s.overrun]
        if overran:
            policy = self._overruns
            fed = await conn.fetch(
                _SQL["feed_back_overruns"],
                [model for model, _ in overran],
                [o.ratio for _, o in overran],
                [o.tokens for _, o in overran],
                [o.cost for _, o in overran],
                policy.suspend,
                policy.max_ratio,
            )
            done.routes.extend(
                RouteFeedback(r["model"], r["reserve_ratio"], r["suspended"]) for r in fed
            )
            await conn.execute(
                _PROBATION["begin_probation"], sorted({model for model, _ in overran})
            )

    async def _diverted(
        self, conn: Conn, diverted: Sequence[CancelEnd], done: BatchWritten
    ) -> list[CancelEnd]:
        """Of the items a guarded transition left alone, those whose cancellation was asked
        for (ended canceled next); the others lost their lease."""
        if not diverted:
            return []
        rows = await conn.fetch(
            _SQL["cancel_requested_held"],
            [c.loaded.item.work_item_id for c in diverted],
            [c.token for c in diverted],
        )
        asked = {row["work_item_id"] for row in rows}
        done.lost.update(
            c.loaded.item.work_item_id for c in diverted if c.loaded.item.work_item_id not in asked
        )
        return [c for c in diverted if c.loaded.item.work_item_id in asked]

    async def _cancel(
        self, conn: Conn, cancels: Sequence[CancelEnd], done: BatchWritten, changes: _Changes
    ) -> None:
        unique = list({c.loaded.item.work_item_id: c for c in cancels}.values())
        messages = [message_text(c.message) for c in unique]
        ended = await _end_held(conn, unique, messages, cancel_requested=True)
        for cancel in unique:
            loaded, item = cancel.loaded, cancel.loaded.item
            if item.work_item_id not in ended:
                done.lost.add(item.work_item_id)
                continue
            done.canceled.add(item.work_item_id)
            changes.ended.add(item.work_item_id)
            if cancel.spend is not None and cancel.attempt > 0:
                changes.attempt_spend.append((item.work_item_id, cancel.attempt, cancel.spend))
            payload = error_payload(
                kind="canceled",
                reason="canceled",
                message=cancel.message,
                disposition="canceled",
                attempt=cancel.attempt,
            )
            changes.entries.append((loaded, NewEntry(cancel.attempt, EntryType.ERROR, payload)))
            changes.states.append(
                _state(loaded, ItemStatus.CANCELED, cancel.attempt, cancel.message)
            )
            outcome = {"work_item_id": str(item.work_item_id), "item_status": "canceled"}
            changes.closings.append((item.thread_id, ThreadStatus.CANCELED, outcome))

    async def _requeue(
        self, conn: Conn, requeues: Sequence[Requeue], done: BatchWritten, changes: _Changes
    ) -> None:
        rows = await conn.fetch(
            _SQL["requeue_items"],
            [r.loaded.item.work_item_id for r in requeues],
            [r.token for r in requeues],
        )
        back = {row["work_item_id"] for row in rows}
        for requeue in requeues:
            item_id = requeue.loaded.item.work_item_id
            if item_id in back:
                done.requeued.add(item_id)
                changes.ended.add(item_id)
            else:
                changes.diverted.append(
                    CancelEnd(
                        requeue.loaded,
                        requeue.token,
                        requeue.loaded.item.attempt,
                        "canceled before its attempt started: no call was made",
                    )
                )

    async def _spend_after(self, conn: Conn, changes: _Changes) -> None:
        """Failed attempts' reservations (released or unknown), then the reservations of
        attempts that never started, for every lease that ended here."""
        if changes.attempt_spend:
            marks = sorted(set(changes.attempt_spend))
            await conn.execute(
                _SQL["mark_attempt_spend"],
                [m[0] for m in marks],
                [m[1] for m in marks],
                [m[2].value for m in marks],
            )
        if changes.ended:
            await conn.execute(_SQL["release_unstarted_spend"], sorted(changes.ended))

    async def start_attempt(
        self, loaded: LoadedItem, token: UUID, attempt: int, prompt: Mapping[str, Any]
    ) -> None:
        """One item's ``AttemptStart`` on its own; ``LeaseLostError`` if it did not start."""
        done = await self.write(BatchWrite(starts=[AttemptStart(loaded, token, attempt, prompt)]))
        if loaded.item.work_item_id not in done.started:
            raise LeaseLostError

    async def record_response(
        self, loaded: LoadedItem, attempt: int, response: dict[str, Any]
    ) -> None:
        """One item's ``ResponseRecord`` on its own."""
        await self.write(BatchWrite(responses=[ResponseRecord.of(loaded, attempt, response)]))

    async def _start(
        self, conn: Conn, starts: Sequence[AttemptStart], done: BatchWritten, changes: _Changes
    ) -> None:
        reissues = [s for s in starts if s.reissue is not None]
        if reissues:
            await self._reissue(conn, reissues, done, changes)
        starts = [s for s in starts if s.reissue is None]
        if not starts:
            return
        rows = await conn.fetch(
            _SQL["start_attempts"],
            [s.loaded.item.work_item_id for s in starts],
            [s.token for s in starts],
            [s.attempt - 1 for s in starts],
        )
        started = {row["work_item_id"]: row["attempt"] for row in rows}
        for start in starts:
            item_id = start.loaded.item.work_item_id
            if started.get(item_id) != start.attempt:
                changes.diverted.append(
                    CancelEnd(
                        start.loaded,
                        start.token,
                        start.attempt - 1,
                        "canceled before its next attempt started: no call was made",
                    )
                )
                continue
            done.started.add(item_id)
            changes.entries.append(
                (start.loaded, NewEntry(start.attempt, EntryType.PROMPT, start.prompt))
            )
            changes.states.append(_state(start.loaded, ItemStatus.RUNNING, start.attempt))

    async def _reissue(
        self, conn: Conn, reissues: Sequence[AttemptStart], done: BatchWritten, changes: _Changes
    ) -> None:
        """Unknown calls sent again under their idempotency keys (outcomes.py): the attempt goes
        on against its reservation; an item no longer held keeps its reservation unknown."""
        rows = await conn.fetch(
            _OUTCOMES["reissue_attempts"],
            [r.loaded.item.work_item_id for r in reissues],
            [r.token for r in reissues],
            [r.attempt for r in reissues],
        )
        going = {row["work_item_id"] for row in rows}
        for reissue in reissues:
            item_id = reissue.loaded.item.work_item_id
            if item_id not in going:
                changes.diverted.append(
                    CancelEnd(
                        reissue.loaded,
                        reissue.token,
                        reissue.attempt,
                        "canceled: the outcome of its last call is unknown (its worker died "
                        "mid-call); not sent again, its spend stays counted",
                        SpendOutcome.UNKNOWN,
                    )
                )
                continue
            assert reissue.reissue is not None  # noqa: S101 - filtered by the caller
            done.started.add(item_id)
            changes.entries.append(
                (reissue.loaded, NewEntry(reissue.attempt, EntryType.ERROR, reissue.reissue))
            )
            changes.states.append(_state(reissue.loaded, ItemStatus.RUNNING, reissue.attempt))

    async def release_unknown(self, horizon_seconds: float, limit: int) -> list[UnknownReleased]:
        """Release reservations left ``unknown`` longer than the horizon (outcomes.py)."""
        rows = await self._pool.fetch(_OUTCOMES["release_unknown_spend"], horizon_seconds, limit)
        return [
            UnknownReleased(
                row["work_item_id"],
                row["attempt"],
                row["org_id"],
                row["model"],
                row["reserved_tokens"],
                row["reserved_cost"],
            )
            for row in rows
        ]

    async def _release(
        self, conn: Conn, releases: Sequence[RetryRelease], done: BatchWritten, changes: _Changes
    ) -> None:
        rows = await conn.fetch(
            _SQL["release_items"],
            [r.loaded.item.work_item_id for r in releases],
            [r.token for r in releases],
            [r.backoff.total_seconds() for r in releases],
            [_message(r.error) for r in releases],
        )
        released = {row["work_item_id"]: (row["not_before"], row["now"]) for row in rows}
        pauses = [r.pause for r in releases if r.pause is not None]
        if pauses:
            await conn.execute(_SQL["pause_route"], [p[0] for p in pauses], [p[1] for p in pauses])
        for release in releases:
            loaded, item = release.loaded, release.loaded.item
            if release.spend is not None:
                changes.attempt_spend.append((item.work_item_id, release.attempt, release.spend))
            if item.work_item_id not in released:
                message = str(release.error.get("message", ""))
                changes.diverted.append(
                    CancelEnd(
                        loaded,
                        release.token,
                        release.attempt,
                        f"canceled; its last attempt had failed: {message}",
                    )
                )
                continue
            changes.ended.add(item.work_item_id)
            not_before, now = released[item.work_item_id]
            done.released[item.work_item_id] = not_before
            payload = {**release.error, "not_before": not_before.isoformat()}
            changes.entries.append((loaded, NewEntry(release.attempt, EntryType.ERROR, payload)))
            changes.states.append(
                _state(
                    loaded,
                    ItemStatus.FAILED,
                    release.attempt,
                    str(release.error.get("message", "")),
                )
            )
            changes.others.append(
                events.item_enqueued(
                    work_item_id=item.work_item_id,
                    thread_id=item.thread_id,
                    sequence=item.sequence,
                    attempt=release.attempt + 1,
                    lock_scope=item.lock_scope,
                    not_before=not_before,
                    kind=loaded.thread_kind,
                    target_ref=loaded.target_ref,
                    input_=item.input,
                    correlation_id=loaded.correlation_id,
                    now=now,
                )
            )

    async def _dead_letter(
        self,
        conn: Conn,
        dead_letters: Sequence[DeadLetterEnd],
        done: BatchWritten,
        changes: _Changes,
    ) -> None:
        messages = [_message(d.error) for d in dead_letters]
        ended = await _end_held(conn, dead_letters, messages, cancel_requested=False)
        for dead in dead_letters:
            loaded, item = dead.loaded, dead.loaded.item
            if dead.spend is not None:
                changes.attempt_spend.append((item.work_item_id, dead.attempt, dead.spend))
            if item.work_item_id not in ended:
                message = str(dead.error.get("message", ""))
                changes.diverted.append(
                    CancelEnd(
                        loaded, dead.token, dead.attempt, f"canceled; its attempt failed: {message}"
                    )
                )
                continue
            changes.ended.add(item.work_item_id)
            done.dead_lettered.add(item.work_item_id)
            for entry in (*dead.extra, NewEntry(dead.attempt, EntryType.ERROR, dead.error)):
                changes.entries.append((loaded, entry))
            message = str(dead.error.get("message", ""))
            changes.states.append(_state(loaded, ItemStatus.DEAD_LETTER, dead.attempt, message))
            outcome = {"work_item_id": str(item.work_item_id), "item_status": "dead_letter"}
            changes.closings.append((item.thread_id, ThreadStatus.FAILED, outcome))

    async def _apply(
        self,
        conn: Conn,
        applies: Sequence[MutationApply],
        done: BatchWritten,
        changes: _Changes,
    ) -> None:
        """Under the target locks (taken once each, in ascending scope order) and the document
        row locks (ascending ids): per document, the mutations applied one after the other —
        each its own version, mutation row and reports — and the document written once, at its
        last version."""
        await TransactionLocks(conn).targets(a.loaded.item.lock_scope for a in applies)
        names = sorted({a.mutation.document_id for a in applies})
        documents = {
            row["document_id"]: row for row in await conn.fetch(_SQL["lock_documents"], names)
        }
        # Whether a mutation is refused depends on its document and itself only, never on the
        # others applied with it: the refused ones are known before any item is marked.
        plan = plan_mutations(applies, {}, documents, self._functions)
        done.refused.update(plan.refused)
        wanted = [a for a in applies if a.loaded.item.work_item_id not in plan.refused]
        if not wanted:
            return
        rows = await conn.fetch(
            _SQL["mark_applied_items"],
            [a.loaded.item.work_item_id for a in wanted],
            [a.token for a in wanted],
        )
        before = {row["work_item_id"]: bool(row["applied_before"]) for row in rows}
        applied = [a for a in wanted if a.loaded.item.work_item_id in before]
        changes.ended.update(before)
        changes.diverted.extend(
            CancelEnd(
                a.loaded,
                a.token,
                a.attempt,
                "canceled while its call was in flight: the answer is recorded, its mutation "
                "is not applied",
            )
            for a in wanted
            if a.loaded.item.work_item_id not in before
        )
        if len(applied) < len(wanted) or any(before.values()):
            plan = plan_mutations(applied, before, documents, self._functions)  # without others
        await self._write_mutations(conn, plan)
        for apply in applied:
            result = plan.applied[apply.loaded.item.work_item_id]
            done.applied[apply.loaded.item.work_item_id] = result
            _report_applied(apply, result, changes)

    @staticmethod
    async def _write_mutations(conn: Conn, plan: MutationPlan[MutationApply]) -> None:
        if not plan.mutations:
            return
        mutations = plan.mutations
        await conn.execute(
            _SQL["insert_mutations"],
            [a.mutation.mutation_id for a, _ in mutations],
            [a.loaded.item.work_item_id for a, _ in mutations],
            [a.loaded.item.thread_id for a, _ in mutations],
            [a.mutation.document_id for a, _ in mutations],
            [a.loaded.item.lock_scope for a, _ in mutations],
            [a.mutation.operation for a, _ in mutations],
            [canonical_text(a.mutation.arguments()) for a, _ in mutations],
            [base for _, base in mutations],
            list(range(len(mutations))),
        )
        written = await conn.fetch(_SQL["update_documents"], *_columns(plan.updates))
        if len(written) != len(plan.updates):
            raise RuntimeError("a document changed under its row lock")  # cannot; rolls back
        await conn.execute(_SQL["insert_document_versions"], *_columns(plan.versions))


def _usage(payload: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(prompt tokens, completion tokens) a response reported; a usage with only a total
    counts it as completion (usually the dearer); none at all settles at the reservation."""
    usage = usage_counts(payload.get("usage"))
    prompt = usage.get("prompt_tokens")
    completion = usage.get("completion_tokens")
    if prompt is None and completion is None and "total_tokens" in usage:
        completion = usage["total_tokens"]
    return (
        prompt if prompt is None or prompt >= 0 else None,
        completion if completion is None or completion >= 0 else None,
    )


def _row(loaded: LoadedItem, entry: NewEntry) -> tuple[ledger.EntryRow, UUID]:
    item = loaded.item
    row = (item.work_item_id, item.thread_id, entry.attempt, entry.entry_type, entry.payload)
    return row, loaded.correlation_id


async def _end_held(
    conn: Conn,
    ends: Sequence[CancelEnd | DeadLetterEnd],
    messages: Sequence[str],
    *,
    cancel_requested: bool,
) -> set[UUID]:
    """End held items with their messages — canceled if their cancellation was asked for, else
    dead_letter — under the lease guard; the ids of those whose lease still held."""
    rows = await conn.fetch(
        _SQL["end_held_items"],
        [e.loaded.item.work_item_id for e in ends],
        [e.token for e in ends],
        list(messages),
        cancel_requested,
    )
    return {row["work_item_id"] for row in rows}


def _message(error: Mapping[str, Any]) -> str:
    return message_text(str(error.get("message", "")))


def _report_applied(apply: MutationApply, result: MutationApplied, changes: _Changes) -> None:
    """parse_report and mutation_report entries, the applied state event, the thread closing."""
    loaded, item, mutation = apply.loaded, apply.loaded.item, apply.mutation
    report = mutation_report_payload(
        mutation_id=str(mutation.mutation_id),
        document_id=mutation.document_id,
        operation=mutation.operation,
        base_version=result.base_version,
        result_version=result.result_version,
        already_applied=result.already_applied,
        lock_scope=item.lock_scope,
        details=mutation.report(),
    )
    changes.entries.append(
        (loaded, NewEntry(apply.attempt, EntryType.PARSE_REPORT, apply.parse_payload))
    )
    changes.entries.append((loaded, NewEntry(apply.attempt, EntryType.MUTATION_REPORT, report)))
    changes.states.append(_state(loaded, ItemStatus.APPLIED, apply.attempt))
    outcome = {
        "work_item_id": str(item.work_item_id),
        "item_status": "applied",
        "mutation_id": str(mutation.mutation_id),
        "document_version": result.result_version,
    }
    changes.closings.append((item.thread_id, ThreadStatus.COMPLETE, outcome))


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


def _columns(rows: Sequence[tuple[Any, ...]]) -> list[list[Any]]:
    """Rows of equal length as one list per column (the arrays of an ``unnest``)."""
    return [list(column) for column in zip(*rows, strict=True)]
