"""`spectral work ...` and `spectral threads ...`: durable LLM work (ADR-035).

Commands (submit, cancel, budgets) act as the database role spectral_producer, observation as
spectral_operator (read only). The executor itself runs as a consumer deployment:
`spectral consume work-executor`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Annotated, Any, TypeVar
from uuid import UUID

import typer

from producers.work.budgets import BudgetChange, BudgetCommands, check_scope
from producers.work.cancel import UnknownThreadError, cancel_thread
from producers.work.commands import (
    DocumentConflictError,
    GenerateAll,
    GenerateEpic,
    WorkCommands,
)
from producers.work.domain.budgets import Period, Scope, ScopeKind
from producers.work.domain.history import reconstruct
from producers.work.domain.model import Priority
from producers.work.domain.read import WorkReader
from producers.work.domain.settings import WorkSettings
from producers.work.reconcile import (
    ExportError,
    ExportFormat,
    Reconciliation,
    read_export,
    reconcile,
)
from producers.work.routes import RouteView, UnknownRouteError, list_routes, resume_route
from producers.work.schemas import (
    BudgetChangeOut,
    BudgetOut,
    CancelResponse,
    CommandResponse,
    HistoryOut,
    ThreadBrief,
    ThreadOut,
)
from spectral.cli._common import EXIT_FAILURE, fail, run, settings
from spectral.db.connect import pooled
from spectral.devstack import resolve_database_url

T = TypeVar("T")

app = typer.Typer(help="Durable LLM work: documents and commands (ADR-035).", no_args_is_help=True)
threads_app = typer.Typer(help="Observe threads and their execution ledger.", no_args_is_help=True)
budget_app = typer.Typer(
    help="Spend budgets per scope — an org, a project, a thread, a model route (tokens and/or "
    "cost per period); a call must fit every budget of its scopes, else its work is parked.",
    no_args_is_help=True,
)
app.add_typer(budget_app, name="budget")
routes_app = typer.Typer(
    help="Model routes: provider overruns (usage billed above a call's reservation), raised "
    "reservations, suspension.",
    no_args_is_help=True,
)
app.add_typer(routes_app, name="routes")

PRODUCER = "spectral_producer"
OPERATOR = "spectral_operator"


def _with_pool(role: str, use: Callable[[Any], Awaitable[T]]) -> T:
    url = resolve_database_url(settings())

    async def go() -> T:
        async with pooled(url, role=role, max_size=2) as pool:
            return await use(pool)

    return run(go())


def _print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True))


# -- spectral work ------------------------------------------------------------------------------


@app.command("put-document")
def put_document(
    path: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, help="A story backlog (JSON).")
    ],
    project: Annotated[str, typer.Option("--project", help="Project id.")],
    document: Annotated[str, typer.Option("--document", help="Document (story backlog) id.")],
) -> None:
    """Create a story backlog document (version 1); content identical to the current version
    is a no-op, any other content is refused (exit 1): documents change only by mutations."""
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        fail(f"{path}: not JSON: {exc}")
    try:
        ref = _with_pool(
            PRODUCER, lambda pool: WorkCommands(pool).put_document(project, document, content)
        )
    except DocumentConflictError as exc:
        fail(f"{exc}: documents change only through mutations (generate commands), never by put")
    typer.echo(f"{ref.document_id} version {ref.version} {'created' if ref.created else 'exists'}")


@app.command()
def submit(  # noqa: PLR0917 - typer maps each parameter to an option
    project: Annotated[str, typer.Option("--project", help="Project id.")],
    backlog: Annotated[str, typer.Option("--backlog", help="Story backlog (document) id.")],
    epic: Annotated[
        list[str] | None,
        typer.Option("--epic", help="Epic id; with --all, restricts the orchestration to these."),
    ] = None,
    all_epics: Annotated[
        bool, typer.Option("--all", help="Generate every epic (generate-all).")
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="Run again even if complete.")] = False,
    stop_on_error: Annotated[
        bool,
        typer.Option("--stop-on-error", help="generate-all: a failed epic cancels unstarted ones."),
    ] = False,
    org: Annotated[
        str | None,
        typer.Option("--org", help="Org id: its model routes, its budget, its fair share."),
    ] = None,
    priority: Annotated[
        Priority, typer.Option("--priority", help="Order among the tenant's waiting items.")
    ] = Priority.NORMAL,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Submit generate-epic (one --epic) or generate-all (--all); prints thread_id and status."""
    epic = epic or []
    if not all_epics and len(epic) != 1:
        fail("give exactly one --epic, or --all", EXIT_FAILURE)
    try:
        command: GenerateEpic | GenerateAll = (
            GenerateAll(
                project_id=project,
                document_id=backlog,
                epic_ids=tuple(epic) or None,
                continue_on_error=not stop_on_error,
                force=force,
                org_id=org,
                priority=priority,
            )
            if all_epics
            else GenerateEpic(project, backlog, epic[0], force=force, org_id=org, priority=priority)
        )
    except ValueError as exc:
        fail(str(exc))

    step = WorkSettings.of(settings()).work_priority_step_seconds

    async def go(pool: Any) -> CommandResponse:
        commands = WorkCommands(pool, priority_step_seconds=step)
        if isinstance(command, GenerateAll):
            return CommandResponse.of(await commands.generate_all(command))
        return CommandResponse.of(await commands.generate_epic(command))

    result = _with_pool(PRODUCER, go)
    if as_json:
        _print_json(result.model_dump(mode="json", exclude_none=True))
        return
    typer.echo(f"{result.thread_id} {result.status} ({result.disposition})")
    for child in result.children or []:
        typer.echo(f"  {child.epic_id}: {child.thread_id} {child.status} ({child.action})")


@app.command()
def cancel(
    thread_id: Annotated[UUID, typer.Argument(help="Thread id (a generate-all: its whole tree).")],
    reason: Annotated[
        str | None, typer.Option("--reason", help="Recorded in the ledger (500 chars at most).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Cancel a thread: waiting items end canceled without a call; an item whose call is in
    flight records its answer and does not apply it. Idempotent."""

    async def go(pool: Any) -> CancelResponse:
        try:
            return CancelResponse.of(await cancel_thread(pool, thread_id, reason=reason))
        except UnknownThreadError as exc:
            fail(str(exc))
        except ValueError as exc:
            fail(str(exc))

    result = _with_pool(PRODUCER, go)
    if as_json:
        _print_json(result.model_dump(mode="json"))
        return
    typer.echo(
        f"{result.thread_id} {result.status} ({result.disposition}): "
        f"{result.canceled_items} waiting item(s) canceled, "
        f"{result.in_flight_items} in flight (their answers are recorded, not applied)"
    )


# -- spectral work budget -----------------------------------------------------------------------


def _print_budget(budget: BudgetOut) -> None:
    limits = [
        *([f"{budget.token_limit:,} tokens"] if budget.token_limit is not None else []),
        *([f"{budget.cost_limit} cost"] if budget.cost_limit is not None else []),
    ]
    typer.echo(
        f"{budget.scope_kind.value} {budget.scope_id}: {' and '.join(limits)} per "
        f"{budget.period}; spent "
        f"{budget.spent_tokens:,} tokens / {budget.spent_cost} cost"
        + (f" since {budget.period_start.isoformat()}" if budget.period_start else "")
        + f"; {budget.outstanding_reservations} reservation(s) outstanding, "
        f"{budget.parked_items} item(s) parked"
        + (
            f", {budget.unknown_outcome_reservations} call(s) of unknown outcome holding "
            f"{budget.unknown_outcome_tokens:,} tokens"
            if budget.unknown_outcome_reservations
            else ""
        )
        + (
            f", {budget.overrun_tokens:,} tokens billed beyond reservations"
            if budget.overrun_tokens
            else ""
        )
        + (" — EXHAUSTED" if budget.exhausted else "")
    )


def _print_change(change: BudgetChange, as_json: bool) -> None:
    out = BudgetChangeOut.of(change)
    if as_json:
        _print_json(out.model_dump(mode="json"))
        return
    if out.budget is not None:
        _print_budget(out.budget)
    else:
        typer.echo(f"{out.scope_kind.value} {out.scope_id}: no budget (not limited)")
    typer.echo(f"{out.resumed_items} parked item(s) resumed")


ProjectOption = Annotated[
    str | None, typer.Option("--project", help="A project's budget (instead of an org's).")
]
ThreadOption = Annotated[
    str | None,
    typer.Option("--thread", help="A thread's budget: its calls and its child threads'."),
]
RouteOption = Annotated[
    str | None, typer.Option("--route", help="A model route's budget: every org's calls to it.")
]


def _scope(
    org: str | None, project: str | None, thread: str | None, route: str | None
) -> Scope | None:
    """The one scope named (None: none was, for listings); exits 2 on two or a bad id."""
    given = [
        (kind, value)
        for kind, value in (
            (ScopeKind.ORG, org),
            (ScopeKind.PROJECT, project),
            (ScopeKind.THREAD, thread),
            (ScopeKind.ROUTE, route),
        )
        if value is not None
    ]
    if len(given) > 1:
        fail("name one scope: an org, or --project, --thread or --route", code=2)
    if not given:
        return None
    try:
        return check_scope(*given[0])
    except ValueError as exc:
        fail(str(exc), code=2)


def _one_scope(
    org: str | None, project: str | None, thread: str | None, route: str | None
) -> Scope:
    scope = _scope(org, project, thread, route)
    if scope is None:
        fail("name a scope: an org, or --project, --thread or --route", code=2)
    return scope


@budget_app.command("set")
def budget_set(  # noqa: PLR0917 - one option per scope kind
    period: Annotated[Period, typer.Option("--period", help="UTC calendar period.")],
    org: Annotated[str | None, typer.Argument(help="Org id.")] = None,
    tokens: Annotated[int | None, typer.Option("--tokens", help="Token limit.", min=0)] = None,
    cost: Annotated[
        str | None, typer.Option("--cost", help="Cost limit (the unit of the prices).")
    ] = None,
    project: ProjectOption = None,
    thread: ThreadOption = None,
    route: RouteOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
) -> None:
    """Set a budget (an org's, or a project's, thread's or route's); the items it parked resume
    (and park again if still over it)."""
    scope = _one_scope(org, project, thread, route)
    try:
        cost_limit = Decimal(cost) if cost is not None else None
    except InvalidOperation:
        fail(f"--cost {cost!r} is not a number")

    async def go(pool: Any) -> BudgetChange:
        try:
            return await BudgetCommands(pool).set(
                scope, period, token_limit=tokens, cost_limit=cost_limit
            )
        except ValueError as exc:
            fail(str(exc))

    _print_change(_with_pool(PRODUCER, go), as_json)


@budget_app.command("remove")
def budget_remove(
    org: Annotated[str | None, typer.Argument(help="Org id.")] = None,
    project: ProjectOption = None,
    thread: ThreadOption = None,
    route: RouteOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
) -> None:
    """Remove a budget (its scope is no longer limited); the items it parked resume."""
    scope = _one_scope(org, project, thread, route)
    change = _with_pool(PRODUCER, lambda pool: BudgetCommands(pool).remove(scope))
    if change is None:
        fail(f"{scope[0].value} {scope[1]!r} has no budget")
    _print_change(change, as_json)


@budget_app.command("show")
def budget_show(
    org: Annotated[str | None, typer.Argument(help="Org id (default: every budget).")] = None,
    project: ProjectOption = None,
    thread: ThreadOption = None,
    route: RouteOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
) -> None:
    """Budgets with their spend in the current period and the items each parked."""
    scope = _scope(org, project, thread, route)

    async def go(pool: Any) -> list[BudgetOut]:
        commands = BudgetCommands(pool)
        if scope is None:
            return [BudgetOut.of(view) for view in await commands.all()]
        view = await commands.get(scope)
        if view is None:
            fail(f"{scope[0].value} {scope[1]!r} has no budget (not limited)")
        return [BudgetOut.of(view)]

    found = _with_pool(OPERATOR, go)
    if as_json:
        _print_json([b.model_dump(mode="json") for b in found])
        return
    for budget in found:
        _print_budget(budget)


# -- spectral threads ---------------------------------------------------------------------------


@threads_app.command()
def show(
    thread_id: Annotated[UUID, typer.Argument(help="Thread id.")],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print as JSON (the API's answer).")
    ] = False,
) -> None:
    """A thread: status, target, items, and child_summary for orchestrations."""
    view = _with_pool(OPERATOR, lambda pool: WorkReader(pool).thread(thread_id))
    if view is None:
        fail(f"no thread {thread_id}")
    out = ThreadOut.of_view(view)
    if as_json:
        _print_json(out.model_dump(mode="json"))
        return
    typer.echo(f"thread     {out.thread_id}  {out.kind}")
    typer.echo(f"status     {out.status}")
    typer.echo(f"target     {json.dumps(out.target_ref, sort_keys=True)}")
    typer.echo(f"created    {out.created_at.isoformat()}")
    typer.echo(f"closed     {out.closed_at.isoformat() if out.closed_at else '-'}")
    if out.parent_thread_id:
        typer.echo(f"parent     {out.parent_thread_id}")
    if out.child_summary is not None:
        counts = ", ".join(f"{k} {v}" for k, v in out.child_summary.items() if v)
        typer.echo(f"children   {counts or 'none'}")
        for child in out.children:
            typer.echo(f"  {child.thread_id} {child.status:<9} {child.target_ref.get('epic_id')}")
    if out.cancel_requested_at:
        typer.echo(
            f"cancel     requested {out.cancel_requested_at.isoformat()} by "
            f"{out.cancel_requested_by}: {out.cancel_reason or '-'}"
        )
    for item in out.items:
        line = (
            f"item {item.sequence}   {item.work_item_id} {item.status} attempt {item.attempt} "
            f"({item.priority})"
        )
        if item.park_reason:
            line += f" — parked: {item.park_reason[:160]}"
        elif item.error_message:
            line += f" — {item.error_message[:120]}"
        typer.echo(line)


@threads_app.command()
def history(
    thread_id: Annotated[
        UUID, typer.Argument(help="Thread id (an orchestration includes its children).")
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
) -> None:
    """The execution reconstructed from the ledger alone; exit 1 if the ledger is inconsistent."""
    entries = _with_pool(OPERATOR, lambda pool: WorkReader(pool).thread_ledger(thread_id))
    if entries is None:
        fail(f"no thread {thread_id}")
    replay = reconstruct(entries)
    out = HistoryOut.of(thread_id, entries, replay)
    if as_json:
        _print_json(out.model_dump(mode="json"))
    else:
        for entry in out.entries:
            item = str(entry.work_item_id)[:8] if entry.work_item_id else "-"
            typer.echo(
                f"{entry.created_at.isoformat(timespec='milliseconds')} item {item} "
                f"#{entry.attempt} {entry.entry_type:<15} {entry.summary}"
            )
        for item_replay in out.items:
            typer.echo(
                f"item {item_replay.work_item_id}: {item_replay.outcome}, "
                f"{item_replay.paid_calls} paid call(s), {item_replay.responses} response(s)"
            )
        typer.echo("ledger consistent" if out.consistent else "LEDGER INCONSISTENT:")
        for problem in out.problems:
            typer.echo(f"  {problem}")
    if not out.consistent:
        raise typer.Exit(EXIT_FAILURE)


@threads_app.command("list")
def list_threads(
    project: Annotated[str, typer.Option("--project", help="Project id.")],
    active: Annotated[
        bool, typer.Option("--active", help="Only open and running threads.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
) -> None:
    """Threads of a project, newest first."""
    found = _with_pool(
        OPERATOR, lambda pool: WorkReader(pool).project_threads(project, active=active)
    )
    briefs = [ThreadBrief.of(t) for t in found]
    if as_json:
        _print_json([b.model_dump(mode="json") for b in briefs])
        return
    for b in briefs:
        typer.echo(f"{b.thread_id} {b.status:<9} {b.kind:<20} {json.dumps(b.target_ref)}")


def _route_line(route: RouteView) -> str:
    state = (
        f"SUSPENDED since {route.suspended_at.isoformat()}: {route.suspend_reason}"
        if (route.suspended_at is not None)
        else "on probation: one call at a time until a bill settles within its reservation"
        if route.probation
        else "taking calls"
    )
    return (
        f"{route.model}: reservations x{route.reserve_ratio.normalize():f}; "
        f"{route.overruns} overrun(s), {route.overrun_tokens:,} tokens / "
        f"{route.overrun_cost.normalize():f} cost billed beyond reservations; {state}"
    )


def _route_json(route: RouteView) -> dict[str, Any]:
    return {
        "model": route.model,
        "reserve_ratio": str(route.reserve_ratio),
        "overruns": route.overruns,
        "overrun_tokens": route.overrun_tokens,
        "overrun_cost": str(route.overrun_cost),
        "suspended_at": route.suspended_at.isoformat() if route.suspended_at else None,
        "suspend_reason": route.suspend_reason,
        "probation": route.probation,
    }


@routes_app.command("list")
def routes_list(
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
) -> None:
    """The model routes called so far: overruns, reserve ratio, suspension."""
    routes = _with_pool(OPERATOR, list_routes)
    if as_json:
        _print_json([_route_json(r) for r in routes])
        return
    for route in routes:
        typer.echo(_route_line(route))
    if not routes:
        typer.echo("no model route has been called yet")


@routes_app.command("resume")
def routes_resume(
    model: Annotated[str, typer.Argument(help="The model route to resume.")],
    reset_ratio: Annotated[
        bool,
        typer.Option(
            "--reset-ratio",
            help="Also lower its reservations back to the worst case (ratio 1): only once the "
            "provider bills within the bound again.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
) -> None:
    """Lift a model route's suspension after a provider overrun: its calls start again."""

    async def go(pool: Any) -> RouteView:
        try:
            return await resume_route(pool, model, reset_ratio=reset_ratio)
        except UnknownRouteError:
            fail(f"no model route {model!r} is known")

    route = _with_pool(PRODUCER, go)
    if as_json:
        _print_json(_route_json(route))
        return
    typer.echo(_route_line(route))


# -- spectral work reconcile --------------------------------------------------------------------


def _reconcile_lines(result: Reconciliation) -> list[str]:
    window = (
        f" (ledger window {result.window[0].isoformat()} .. {result.window[1].isoformat()})"
        if result.window
        else ""
    )
    summary = (
        f"{result.rows:,} billed row(s), {result.matched:,} matched the ledger{window}; "
        f"{result.discrepancies:,} discrepancy(ies), {len(result.invalid):,} invalid row(s)"
    )
    lines = [summary]
    for title, entries in (
        ("billed but unknown to the ledger", result.unknown_to_ledger),
        ("settled in the ledger but not billed", result.not_billed),
        ("billed amount differs from the ledger", result.amount_differs),
        ("billed, outcome unknown to the ledger", result.billed_unknown_outcome),
    ):
        if entries:
            lines.append(f"{title}: {len(entries):,}")
            lines += [f"  {json.dumps(e, sort_keys=True, default=str)}" for e in entries[:20]]
    if result.duplicates:
        lines.append(f"billed more than once: {', '.join(result.duplicates[:20])}")
    lines += [f"invalid line {line}: {why}" for line, why in result.invalid[:20]]
    for title, drifts in (("route", result.by_route), ("org", result.by_org)):
        for name, drift in sorted(drifts.items()):
            lines.append(
                f"{title} {name}: billed {drift.billed_tokens:,} tokens / {drift.billed_cost} "
                f"cost, recorded {drift.recorded_tokens:,} / {drift.recorded_cost}"
            )
    return lines


@app.command("reconcile")
def reconcile_export(
    file: Annotated[
        Path,
        typer.Argument(
            help="A provider's billing export: CSV (idempotency_key or call_id, tokens, cost?) "
            "or JSON lines with those fields.",
            exists=True,
            dir_okay=False,
            readable=True,
        ),
    ],
    fmt: Annotated[
        ExportFormat | None,
        typer.Option("--format", help="csv or jsonl (default: from the file's extension)."),
    ] = None,
    since: Annotated[
        datetime | None,
        typer.Option("--since", help="Ledger window start (reservation time, UTC)."),
    ] = None,
    until: Annotated[
        datetime | None,
        typer.Option("--until", help="Ledger window end (reservation time, UTC)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
) -> None:
    """Compare a provider's billing export with the spend ledger: calls billed but unknown to
    it, calls it settled that were not billed, amounts that differ, drift per route and org.
    Exit 1 on any discrepancy or invalid row, 2 when the file is not an export."""
    try:
        with file.open("rb") as stream:
            export = read_export(stream, fmt or ExportFormat.of(file))
    except ExportError as exc:
        fail(f"{file}: {exc}", code=2)
    start, end = (_utc(t) for t in (since, until))

    async def go(pool: Any) -> Reconciliation:
        async with pool.acquire() as conn:
            return await reconcile(conn, export, since=start, until=end)

    result = _with_pool(OPERATOR, go)
    if as_json:
        _print_json(result.as_json())
    else:
        for line in _reconcile_lines(result):
            typer.echo(line)
    if not result.clean:
        raise typer.Exit(EXIT_FAILURE)


def _utc(value: datetime | None) -> datetime | None:
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)
