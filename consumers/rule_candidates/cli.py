"""`spectral triage list | show | set`: the operator's failure-cluster inbox (ADR-057 D5).

Connects as the operator role (``spectral_operator``): SPECTRAL_OPERATOR_DATABASE_URL when set
(a login that already is an operator), else the database URL with that role assumed. The role
can write only status, assigned_to, notes and deleted_at; the status policy is
consumers/rule_candidates/transitions.py.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar
from uuid import UUID

import typer
from rich.console import Console
from rich.table import Table

from consumers.rule_candidates.transitions import Status, TransitionError
from consumers.rule_candidates.triage import (
    CandidateDetail,
    CandidateSummary,
    ClusterNotFoundError,
    DeletedChange,
    ListFilter,
    Severity,
    TriageChange,
    TriageOutcome,
    TriageRepository,
    VersionConflictError,
    connect_operator,
)
from spectral.cli._common import fail, run, settings
from spectral.devstack import resolve_database_url

app = typer.Typer(
    help="Triage failure clusters: list, show and set status, assignee and notes.",
    no_args_is_help=True,
)

T = TypeVar("T")


async def _with_repository(use: Callable[[TriageRepository], Awaitable[T]]) -> T:
    current = settings()
    if current.operator_database_url is not None:
        conn = await connect_operator(
            current.operator_database_url.get_secret_value(), assume_role=False
        )
    else:
        conn = await connect_operator(resolve_database_url(current))
    try:
        return await use(TriageRepository(conn))
    finally:
        await conn.close()


def _console() -> Console:
    console = Console()
    # Off a terminal (pipes, CI) keep whole UUIDs on one line rather than 80 columns.
    return console if console.is_terminal else Console(width=200)


def _print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, ensure_ascii=False))


def _when(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value is not None else "-"


_SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "green"}


@app.command("list")
def list_(
    *,
    status: Annotated[Status | None, typer.Option(help="Only clusters in this status.")] = None,
    severity: Annotated[
        Severity | None, typer.Option(help="Only clusters of this severity.")
    ] = None,
    workspace: Annotated[
        UUID | None, typer.Option(help="Only clusters of this workspace_id.")
    ] = None,
    resurfaced: Annotated[
        bool,
        typer.Option("--resurfaced", help="Only clusters that came back after their last triage."),
    ] = False,
    include_deleted: Annotated[
        bool, typer.Option("--include-deleted", help="Also soft-deleted clusters.")
    ] = False,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="Most rows to show.")] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table.")] = False,
) -> None:
    """The inbox, most severe and most recently observed first."""
    where = ListFilter(status, severity, workspace, resurfaced, include_deleted, limit)
    rows = run(_with_repository(lambda repo: repo.list(where)))
    if as_json:
        _print_json([r.to_json() for r in rows])
        return
    _console().print(_table(rows))


def _table(rows: list[CandidateSummary]) -> Table:
    table = Table(title=f"rule candidates ({len(rows)})", title_justify="left")
    for column in ("cluster_id", "severity", "status", "failures", "last observed"):
        table.add_column(column, no_wrap=True)
    table.add_column("workspace_id", no_wrap=True)
    table.add_column("assigned_to", no_wrap=True)
    table.add_column("flags")
    for r in rows:
        flags = " ".join(
            flag
            for flag, on in (("resurfaced", r.resurfaced), ("deleted", r.deleted_at is not None))
            if on
        )
        table.add_row(
            str(r.cluster_id),
            f"[{_SEVERITY_STYLE.get(r.severity, '')}]{r.severity}[/]",
            r.status.value,
            str(r.failure_count),
            _when(r.last_observed_at),
            str(r.workspace_id),
            str(r.assigned_to) if r.assigned_to else "-",
            flags,
        )
    return table


@app.command()
def show(
    cluster_id: Annotated[UUID, typer.Argument(help="The cluster to show.")],
    *,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of text.")] = False,
) -> None:
    """One cluster: its snapshot, evidence bundle and triage state."""
    try:
        detail = run(_with_repository(lambda repo: repo.get(cluster_id)))
    except ClusterNotFoundError as exc:
        fail(str(exc))
    if as_json:
        _print_json(detail.to_json())
        return
    _print_detail(detail)


def _print_detail(d: CandidateDetail) -> None:
    console = _console()
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    for name, value in (
        ("cluster_id", str(d.cluster_id)),
        ("status", d.status.value),
        ("severity", d.severity),
        ("failures", str(d.failure_count)),
        ("observed", f"{_when(d.first_observed_at)} .. {_when(d.last_observed_at)}"),
        ("rule_id", str(d.rule_id)),
        ("workspace_id", str(d.workspace_id)),
        ("assigned_to", str(d.assigned_to) if d.assigned_to else "-"),
        ("notes", d.notes or "-"),
        ("resurfaced", f"yes, at {_when(d.resurfaced_at)}" if d.resurfaced else "no"),
        ("last signaled", _when(d.last_signaled_at)),
        ("first seen", _when(d.created_at)),
        ("deleted", _when(d.deleted_at) if d.deleted_at else "no"),
        ("snapshot_hash", d.snapshot_hash),
        ("triage version", str(d.triage_version)),
    ):
        facts.add_row(name, value)
    console.print(facts)
    evidence = Table(title=f"evidence ({len(d.evidence_bundle)})", title_justify="left")
    for column in ("failure_id", "observed_at", "summary"):
        evidence.add_column(column)
    for item in d.evidence_bundle:
        ref = item if isinstance(item, dict) else {}
        evidence.add_row(
            str(ref.get("failure_id", "")),
            str(ref.get("observed_at", "")),
            str(ref.get("summary", "")),
        )
    console.print(evidence)
    if d.suggested_rule_stub:
        console.print("[bold]suggested rule stub[/]")
        console.print(d.suggested_rule_stub, markup=False, highlight=False)
    audit = Table(title=f"audit trail ({len(d.audit)})", title_justify="left")
    for column in ("version", "when", "who", "changes"):
        audit.add_column(column)
    for entry in d.audit:
        changes = "; ".join(
            f"{name}: {old if old is not None else '-'} -> {new if new is not None else '-'}"
            for name, (old, new) in entry.changes().items()
        )
        audit.add_row(str(entry.triage_version), _when(entry.changed_at), entry.who(), changes)
    console.print(audit)


@app.command("set")
def set_(
    cluster_id: Annotated[UUID, typer.Argument(help="The cluster to triage.")],
    *,
    status: Annotated[
        Status | None, typer.Option(help="New status (transitions are validated).")
    ] = None,
    assignee: Annotated[
        UUID | None, typer.Option(help="Assign the cluster to this user id.")
    ] = None,
    unassign: Annotated[bool, typer.Option("--unassign", help="Clear the assignee.")] = False,
    notes: Annotated[str | None, typer.Option(help="Replace the notes ('' clears them).")] = None,
    delete: Annotated[
        bool, typer.Option("--delete", help="Soft-delete (hide from the inbox).")
    ] = False,
    restore: Annotated[bool, typer.Option("--restore", help="Undo a soft delete.")] = False,
    expect_version: Annotated[
        int | None,
        typer.Option(
            "--expect-version",
            min=0,
            help="Refuse the change if the triage version is no longer this one (see show).",
        ),
    ] = None,
) -> None:
    """Change a cluster's triage state: status, assignee, notes (only the operator columns)."""
    if assignee is not None and unassign:
        fail("--assignee and --unassign exclude each other")
    if delete and restore:
        fail("--delete and --restore exclude each other")
    deleted: DeletedChange = "delete" if delete else "restore" if restore else "keep"
    change = TriageChange(
        status=status,
        change_assignee=assignee is not None or unassign,
        assignee=assignee,
        change_notes=notes is not None,
        notes=notes or None,
        deleted=deleted,
    )
    if change.is_empty:
        fail(
            "nothing to change: give --status, --assignee/--unassign, --notes or --delete/--restore"
        )
    try:
        outcome = run(
            _with_repository(
                lambda repo: repo.update(cluster_id, change, expected_version=expect_version)
            )
        )
    except (ClusterNotFoundError, TransitionError, VersionConflictError) as exc:
        fail(str(exc))
    typer.echo(_describe(outcome))


def _describe(outcome: TriageOutcome) -> str:
    c = outcome.candidate
    if outcome.status_changed:
        status = f"{outcome.previous_status.value} -> {c.status.value}"
    else:
        status = f"{c.status.value} (unchanged)"
    assigned = str(c.assigned_to) if c.assigned_to else "nobody"
    deleted = ", deleted" if c.deleted_at else ""
    return f"cluster {c.cluster_id}: {status}, assigned to {assigned}{deleted}"
