"""Request and response models of the work API (ADR-035 §12); the CLI prints the same."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from producers.work.budgets import BudgetChange
from producers.work.cancel import MAX_REASON_CHARS, CancelResult
from producers.work.commands import CommandResult, GenerateAll, GenerateEpic
from producers.work.domain.budgets import BudgetView, Period, ScopeKind
from producers.work.domain.history import History, describe
from producers.work.domain.identity import IDENTIFIER_PATTERN
from producers.work.domain.model import (
    ItemStatus,
    LedgerEntry,
    Priority,
    Thread,
    ThreadStatus,
    ThreadView,
    WorkItem,
)

Identifier = Annotated[str, StringConstraints(pattern=IDENTIFIER_PATTERN)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GenerateEpicRequest(_Model):
    """Generate the stories of one epic of a story backlog."""

    project_id: Identifier
    document_id: Identifier = Field(alias="story_backlog_id")
    epic_id: Identifier
    force: bool = Field(default=False, description="Run again even if a complete thread exists.")
    org_id: Identifier | None = Field(
        default=None,
        description="The org the work is paid for: selects org-specific routes, its budget and "
        "its fair share of the executors (tenant org:{org_id}; else the project).",
    )
    priority: Priority = Field(
        default=Priority.NORMAL,
        description="high | normal | low: order among the tenant's waiting items; an item "
        "waiting long enough overtakes newer items of a higher priority (ageing).",
    )

    def command(self, requested_by: str) -> GenerateEpic:
        """The command this request asks for, on behalf of ``requested_by``."""
        return GenerateEpic(**self.model_dump(), requested_by=requested_by)


class GenerateAllRequest(_Model):
    """Generate the stories of every epic (or the listed ones): a parent thread with one child
    thread per epic."""

    project_id: Identifier
    document_id: Identifier = Field(alias="story_backlog_id")
    epic_ids: tuple[Identifier, ...] | None = Field(
        default=None, description="Default: every epic."
    )
    continue_on_error: bool = Field(
        default=True,
        description="False: a failed child cancels the siblings that have not started.",
    )
    force: bool = False
    org_id: Identifier | None = None
    priority: Priority = Priority.NORMAL

    def command(self, requested_by: str) -> GenerateAll:
        """The command this request asks for, on behalf of ``requested_by``."""
        return GenerateAll(**self.model_dump(), requested_by=requested_by)


class CancelRequest(_Model):
    """Cancel a thread (a generate-all: with its whole tree)."""

    reason: str | None = Field(
        default=None, max_length=MAX_REASON_CHARS, description="Recorded in the ledger."
    )


class CancelResponse(_Model):
    thread_id: UUID
    status: ThreadStatus
    disposition: str = Field(
        description="canceled (closed now) | canceling (items in flight end canceled when their "
        "calls answer) | already_requested | already_closed"
    )
    canceled_items: int = Field(description="Waiting items ended now, without a call.")
    in_flight_items: int = Field(
        description="Items whose call is in flight: their answer is recorded, not applied."
    )

    @classmethod
    def of(cls, result: CancelResult) -> CancelResponse:
        return cls(
            thread_id=result.thread_id,
            status=result.status,
            disposition=result.disposition.value,
            canceled_items=result.canceled_items,
            in_flight_items=result.in_flight_items,
        )


class BudgetIn(_Model):
    """A budget (an org's, a project's, a thread's or a model route's): tokens and/or cost (the
    unit of the configured prices) per period."""

    period: Period = Field(description="hour | day | week | month (UTC calendar) | total")
    token_limit: int | None = Field(default=None, ge=0, le=2**62)
    cost_limit: Decimal | None = Field(default=None, ge=0, max_digits=24, decimal_places=9)


class BudgetOut(_Model):
    scope_kind: ScopeKind = Field(
        description="org | project | thread (its calls and its child threads') | route (a model "
        "route, every org's calls to it). A call is admitted only if every budget of its "
        "scopes has room for its reservation."
    )
    scope_id: str = Field(description="The org id, project id, thread id or model.")
    org_id: str | None = Field(description="The org of an org budget (null for other kinds).")
    period: str
    token_limit: int | None
    cost_limit: Decimal | None
    updated_at: datetime
    updated_by: str
    period_start: datetime | None = Field(description="Null for period total.")
    spent_tokens: int = Field(description="Settled usage plus reservations not settled yet.")
    spent_cost: Decimal
    outstanding_reservations: int
    parked_items: int = Field(description="Items this budget parked (waiting for it).")
    unknown_outcome_reservations: int = Field(
        0,
        description="Reservations of calls whose outcome is unknown (the worker died or the call "
        "timed out after the request left): counted in full in the spend, never re-paid "
        "silently, until a usage reconciliation settles them.",
    )
    unknown_outcome_tokens: int = Field(0, description="The tokens those reservations hold.")
    overrun_tokens: int = Field(
        0,
        description="Tokens providers billed beyond the reservations of the scope's calls in "
        "the period (provider overruns; included in spent_tokens).",
    )
    exhausted: bool

    @classmethod
    def of(cls, view: BudgetView) -> BudgetOut:
        return cls(
            scope_kind=view.kind,
            scope_id=view.scope_id,
            org_id=view.org_id,
            period=view.period.value,
            token_limit=view.token_limit,
            cost_limit=view.cost_limit,
            updated_at=view.updated_at,
            updated_by=view.updated_by,
            period_start=view.period_start,
            spent_tokens=view.tokens,
            spent_cost=view.cost,
            outstanding_reservations=view.outstanding,
            parked_items=view.parked,
            unknown_outcome_reservations=view.unknown,
            unknown_outcome_tokens=view.unknown_tokens,
            overrun_tokens=view.overrun_tokens,
            exhausted=view.exhausted,
        )


class BudgetChangeOut(_Model):
    scope_kind: ScopeKind
    scope_id: str
    org_id: str | None = Field(description="The org of an org budget (null for other kinds).")
    budget: BudgetOut | None = Field(description="Null once removed.")
    resumed_items: int = Field(description="Parked items the change resumed.")

    @classmethod
    def of(cls, change: BudgetChange) -> BudgetChangeOut:
        return cls(
            scope_kind=change.scope[0],
            scope_id=change.scope[1],
            org_id=change.org_id,
            budget=BudgetOut.of(change.budget) if change.budget is not None else None,
            resumed_items=change.resumed,
        )


class BudgetList(_Model):
    budgets: list[BudgetOut]


class ChildOutcome(_Model):
    epic_id: str
    thread_id: UUID
    status: ThreadStatus
    action: str


class CommandResponse(_Model):
    thread_id: UUID
    status: ThreadStatus
    disposition: str = Field(description="created | existing | noop | retried")
    children: list[ChildOutcome] | None = None

    @classmethod
    def of(cls, result: CommandResult) -> CommandResponse:
        return cls(
            thread_id=result.thread_id,
            status=result.status,
            disposition=result.disposition.value,
            children=[
                ChildOutcome(
                    epic_id=c.epic_id,
                    thread_id=c.thread_id,
                    status=c.status,
                    action=c.action.value,
                )
                for c in result.children
            ]
            or None,
        )


class ItemOut(_Model):
    work_item_id: UUID
    sequence: int
    status: ItemStatus = Field(
        description="queued | claimed | running | failed (a retry waits for not_before) | "
        "parked (waits for a budget of its org, project, thread or route: nothing paid, "
        "nothing failed) | applied | dead_letter | canceled (the last three are terminal)"
    )
    attempt: int
    lock_scope: str
    not_before: datetime
    error_message: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    priority: Priority = Priority.NORMAL
    tenant: str | None = None
    org_id: str | None = None
    park_reason: str | None = Field(
        default=None, description="Why a parked item waits (the budget scope that parked it)."
    )
    cancel_requested_at: datetime | None = None

    @classmethod
    def of(cls, item: WorkItem) -> ItemOut:
        return cls(
            work_item_id=item.work_item_id,
            sequence=item.sequence,
            status=item.status,
            attempt=item.attempt,
            lock_scope=item.lock_scope,
            not_before=item.not_before,
            error_message=item.error_message,
            created_at=item.created_at,
            started_at=item.started_at,
            finished_at=item.finished_at,
            priority=item.priority,
            tenant=item.tenant,
            org_id=item.org_id,
            park_reason=item.park_reason,
            cancel_requested_at=item.cancel_requested_at,
        )


class ThreadBrief(_Model):
    thread_id: UUID
    kind: str
    status: ThreadStatus = Field(
        description="open | running | complete | failed | canceled (the last three are terminal)"
    )
    target_ref: dict[str, Any]
    parent_thread_id: UUID | None
    created_at: datetime
    closed_at: datetime | None
    requested_by: str | None = Field(
        default=None,
        description="Who submitted the command: token:NAME, or db:LOGIN (as the submitting "
        "session declared it).",
    )
    requested_by_login: str | None = Field(
        default=None,
        description="The database login that created the thread: the API's own for commands "
        "through it. A requested_by another login wrote gives a forged name away.",
    )
    cancel_requested_at: datetime | None = None
    cancel_requested_by: str | None = None
    cancel_reason: str | None = None

    @classmethod
    def of(cls, thread: Thread) -> ThreadBrief:
        return cls(
            thread_id=thread.thread_id,
            kind=thread.kind.value,
            status=thread.status,
            target_ref=dict(thread.target_ref),
            parent_thread_id=thread.parent_thread_id,
            created_at=thread.created_at,
            closed_at=thread.closed_at,
            requested_by=thread.requested_by,
            cancel_requested_at=thread.cancel_requested_at,
            cancel_requested_by=thread.cancel_requested_by,
            cancel_reason=thread.cancel_reason,
            requested_by_login=thread.requested_by_login,
        )


class ThreadOut(ThreadBrief):
    """ADR-035 §12: thread_id, status, target_ref, created_at, closed_at, child_summary?"""

    child_summary: dict[str, int] | None = Field(
        default=None, description="Counts of child threads by status (orchestration threads)."
    )
    outcome: dict[str, Any] | None = None
    items: list[ItemOut] = Field(default_factory=list)
    children: list[ThreadBrief] = Field(default_factory=list)

    @classmethod
    def of_view(cls, view: ThreadView) -> ThreadOut:
        brief = ThreadBrief.of(view.thread)
        return cls(
            **brief.model_dump(),
            child_summary=dict(view.child_summary) if view.child_summary is not None else None,
            outcome=dict(view.thread.outcome) if view.thread.outcome is not None else None,
            items=[ItemOut.of(i) for i in view.items],
            children=[ThreadBrief.of(c) for c in view.children],
        )


class ThreadList(_Model):
    threads: list[ThreadBrief]
    next_cursor: str | None = Field(
        default=None, description="Pass as ?cursor= for the next page; null on the last page."
    )


class EntryOut(_Model):
    seq: int
    entry_id: UUID
    thread_id: UUID
    work_item_id: UUID | None
    attempt: int
    entry_type: str
    created_at: datetime
    hash: str
    summary: str
    payload: dict[str, Any]

    @classmethod
    def of(cls, entry: LedgerEntry) -> EntryOut:
        return cls(
            seq=entry.seq,
            entry_id=entry.entry_id,
            thread_id=entry.thread_id,
            work_item_id=entry.work_item_id,
            attempt=entry.attempt,
            entry_type=entry.entry_type.value,
            created_at=entry.created_at,
            hash=entry.hash,
            summary=describe(entry),
            payload=dict(entry.payload),
        )


class ItemReplay(_Model):
    work_item_id: UUID
    thread_id: UUID
    outcome: str
    paid_calls: int
    responses: int


class HistoryOut(_Model):
    """Execution reconstructed from the ledger alone."""

    thread_id: UUID
    consistent: bool
    problems: list[str]
    items: list[ItemReplay]
    entries: list[EntryOut]

    @classmethod
    def of(cls, thread_id: UUID, entries: list[LedgerEntry], history: History) -> HistoryOut:
        return cls(
            thread_id=thread_id,
            consistent=history.consistent,
            problems=list(history.problems),
            items=[
                ItemReplay(
                    work_item_id=i.work_item_id,
                    thread_id=i.thread_id,
                    outcome=i.outcome.value,
                    paid_calls=i.paid_calls,
                    responses=i.responses,
                )
                for i in history.items.values()
            ],
            entries=[EntryOut.of(e) for e in entries],
        )


class DocumentOut(_Model):
    document_id: str
    project_id: str
    doc_type: str
    version: int
    content: dict[str, Any]
    created: bool | None = None


def as_json(model: BaseModel) -> Mapping[str, Any]:
    return model.model_dump(mode="json")
