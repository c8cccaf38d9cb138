"""Thread pages of the web console (ADR-035 §11: what they show derives only from stored
documents and thread metadata): a project's threads, one thread with its child summary and
items (their priority, a parked item's reason, a cancellation under way), the ledger timeline
of its items and a form to cancel it (``work:cancel``); the orgs' budgets with their spend and
parked items, and a form to set one (``work:budget``)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from markupsafe import Markup

from producers.work.budgets import ROUTE_MAX_LENGTH, BudgetCommands, check_scope
from producers.work.cancel import MAX_REASON_CHARS, UnknownThreadError, cancel_thread
from producers.work.domain.budgets import Period, ScopeKind
from producers.work.domain.history import reconstruct
from producers.work.domain.identity import IDENTIFIER_PATTERN
from producers.work.domain.read import ProjectBrief, SpendPoint, WorkReader
from producers.work.plugin import WORK_BUDGET, WORK_CANCEL, WORK_READ
from producers.work.schemas import BudgetOut, EntryOut, HistoryOut, ThreadBrief, ThreadOut
from spectral.api.auth import check_csrf, console_requires
from spectral.api.problems import ProblemError, ProblemType, not_found
from spectral.api.resources import Resources
from spectral.auth.tokens import Principal
from spectral.console.charts import Point, time_chart
from spectral.console.site import PREFIX, Console


def router(console: Console, resources: Resources) -> APIRouter:
    pages = APIRouter(prefix=PREFIX, include_in_schema=False)
    reader = Depends(console_requires(resources, WORK_READ))

    @pages.get("/threads")
    async def console_threads(
        *,
        request: Request,
        principal: Principal = reader,
        project: Annotated[str | None, Query(max_length=128, pattern=IDENTIFIER_PATTERN)] = None,
        active: Annotated[str | None, Query(max_length=5)] = None,
    ) -> HTMLResponse:
        threads: list[ThreadBrief] = []
        projects: list[ProjectBrief] = []
        if not project:
            projects = await WorkReader(resources.operator).projects(limit=200)
        else:
            found = await WorkReader(resources.operator).project_threads(
                project, active=active == "1", limit=200
            )
            threads = [ThreadBrief.of(t) for t in found]
        return console.page(
            request,
            "threads.html",
            principal,
            section="threads",
            project=project or "",
            active=active == "1",
            threads=threads,
            projects=projects,
        )

    @pages.get("/threads/{thread_id}")
    async def console_thread(
        *, request: Request, thread_id: UUID, principal: Principal = reader
    ) -> HTMLResponse:
        work = WorkReader(resources.operator)
        view = await work.thread(thread_id)
        if view is None:
            raise not_found(f"no thread {thread_id}")
        entries = await work.thread_ledger(thread_id) or []
        history = HistoryOut.of(thread_id, entries, reconstruct(entries))
        by_item: dict[str, list[EntryOut]] = {}
        for entry in history.entries:
            by_item.setdefault(str(entry.work_item_id or "-"), []).append(entry)
        return console.page(
            request,
            "thread.html",
            principal,
            section="threads",
            t=ThreadOut.of_view(view),
            history=history,
            by_item=by_item,
            can_cancel=principal.allows(WORK_CANCEL),
            max_reason=MAX_REASON_CHARS,
        )

    _governance(pages, console, resources)
    return pages


def _governance(pages: APIRouter, console: Console, resources: Resources) -> None:
    canceler = Depends(console_requires(resources, WORK_CANCEL))
    reader = Depends(console_requires(resources, WORK_READ))
    budgeter = Depends(console_requires(resources, WORK_BUDGET))

    @pages.post("/threads/{thread_id}/cancel")
    async def console_cancel(
        *,
        request: Request,
        thread_id: UUID,
        principal: Principal = canceler,
        csrf: Annotated[str, Form(max_length=200)] = "",
        reason: Annotated[str, Form(max_length=MAX_REASON_CHARS)] = "",
    ) -> RedirectResponse:
        check_csrf(request, csrf)
        try:
            await cancel_thread(
                resources.producer,
                thread_id,
                reason=reason or None,
                requested_by=principal.actor,
            )
        except UnknownThreadError as exc:
            raise not_found(str(exc)) from None
        return RedirectResponse(f"{PREFIX}/threads/{thread_id}", status_code=303)

    @pages.get("/budgets")
    async def console_budgets(*, request: Request, principal: Principal = reader) -> HTMLResponse:
        views = await BudgetCommands(resources.operator).all()
        history = await WorkReader(resources.operator).spend_over_period()
        budgets = [BudgetOut.of(v) for v in views]
        return console.page(
            request,
            "budgets.html",
            principal,
            section="budgets",
            budgets=budgets,
            charts={
                b.org_id: _spend_chart(b, history.get(b.org_id, [])) for b in budgets if b.org_id
            },
            periods=[p.value for p in Period],
            scope_kinds=[k.value for k in ScopeKind],
            can_set=principal.allows(WORK_BUDGET),
        )

    @pages.post("/budgets")
    async def console_set_budget(
        *,
        request: Request,
        principal: Principal = budgeter,
        org_id: Annotated[str, Form(max_length=ROUTE_MAX_LENGTH)],
        period: Annotated[Period, Form()],
        scope_kind: Annotated[ScopeKind, Form()] = ScopeKind.ORG,
        csrf: Annotated[str, Form(max_length=200)] = "",
        tokens: Annotated[str, Form(max_length=20)] = "",
        cost: Annotated[str, Form(max_length=40)] = "",
    ) -> RedirectResponse:
        check_csrf(request, csrf)
        try:
            token_limit = int(tokens) if tokens.strip() else None
            cost_limit = Decimal(cost) if cost.strip() else None
            await BudgetCommands(resources.producer).set(
                check_scope(scope_kind, org_id),
                period,
                token_limit=token_limit,
                cost_limit=cost_limit,
                requested_by=principal.actor,
            )
        except (ValueError, InvalidOperation) as exc:
            raise ProblemError(
                422, f"the budget was not set: {exc}", slug=ProblemType.INVALID_REQUEST
            ) from None
        return RedirectResponse(f"{PREFIX}/budgets", status_code=303)


def _spend_chart(budget: BudgetOut, spend: list[SpendPoint]) -> Markup:
    """An org's spend over its budget period against its limit: tokens when the budget limits
    tokens, else cost."""
    by_tokens = budget.token_limit is not None
    values = [(p.at, float(p.tokens if by_tokens else p.cost)) for p in spend]
    limit = budget.token_limit if by_tokens else budget.cost_limit
    now = datetime.now(UTC)
    points = [Point(budget.period_start, 0.0)] if budget.period_start is not None else []
    points += [Point(at, value) for at, value in values]
    if points:
        points.append(Point(now, points[-1].value))  # nothing more spent since
    unit = "tokens" if by_tokens else "cost"
    return time_chart(
        points,
        title=f"Spend of {budget.org_id} this {budget.period} ({unit}) against its limit",
        y_label=unit,
        limit=float(limit) if limit is not None else None,
        limit_label=f"limit {limit:,}" if limit is not None else "",
    )
