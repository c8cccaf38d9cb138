"""Triage pages of the web console: the inbox (filters, severity, resurfaced marker), one
cluster (evidence, triage form, audit trail), and the form's POST.

The form carries the ``triage_version`` it was rendered with: a cluster changed meanwhile is
not overwritten — the page comes back with 409, the other change shown and the operator's
input kept, to apply again on purpose.
"""

from __future__ import annotations

from typing import Annotated, Final
from uuid import UUID

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from consumers.rule_candidates.api import (
    NOTES_MAX_CHARS,
    decode_page_cursor,
    encode_page_cursor,
)
from consumers.rule_candidates.plugin import TRIAGE_READ, TRIAGE_WRITE
from consumers.rule_candidates.transitions import Status, TransitionError, allowed_from
from consumers.rule_candidates.triage import (
    ClusterNotFoundError,
    ListFilter,
    Severity,
    Sort,
    TriageChange,
    TriageRepository,
    VersionConflictError,
)
from spectral.api.auth import check_csrf, console_requires
from spectral.api.problems import ProblemError, ProblemType, not_found
from spectral.api.resources import Resources
from spectral.api.text import hidden_characters
from spectral.auth.tokens import Principal
from spectral.console.charts import Point, sparkline, time_chart
from spectral.console.site import PREFIX, Console

PAGE_SIZE: Final = 50
_CURSOR_KIND: Final = "console-clusters"
OPEN: Final = "open"
ALL: Final = "all"
_OPEN: Final = (Status.PENDING.value, Status.IN_REVIEW.value)
_VIEWS: Final[dict[str, tuple[Status, ...]]] = {
    OPEN: (Status.PENDING, Status.IN_REVIEW),
    ALL: (),
}
"""The inbox's views besides one status: open work (its default) and everything."""


def _view_counts(counts: dict[tuple[str, str], int]) -> list[tuple[str, str, int]]:
    """(view, label, live clusters) for the inbox's tabs: open work first, each status, all."""
    per_status = {s.value: 0 for s in Status}
    for (status, _), n in counts.items():
        per_status[status] = per_status.get(status, 0) + n
    return [
        (OPEN, "Open work", sum(per_status[s] for s in _OPEN)),
        *((s, s.replace("_", " "), n) for s, n in per_status.items()),
        (ALL, "All", sum(per_status.values())),
    ]


def _blank_none(value: str | None) -> str | None:
    return value or None


def router(console: Console, resources: Resources) -> APIRouter:  # noqa: C901
    pages = APIRouter(prefix=PREFIX, include_in_schema=False)
    reader = Depends(console_requires(resources, TRIAGE_READ))
    writer = Depends(console_requires(resources, TRIAGE_WRITE))

    @pages.get("/clusters")
    async def console_clusters(
        *,
        request: Request,
        principal: Principal = reader,
        status: Annotated[str | None, Query(max_length=20)] = None,
        severity: Annotated[str | None, Query(max_length=20)] = None,
        resurfaced: Annotated[str | None, Query(max_length=5)] = None,
        sort: Annotated[str | None, Query(max_length=20)] = None,
        cursor: Annotated[str | None, Query(max_length=512)] = None,
    ) -> HTMLResponse:
        view = status or OPEN
        try:
            statuses = _VIEWS[view] if view in _VIEWS else (Status(view),)
            where_severity = Severity(severity) if severity else None
            order = Sort(sort) if sort else Sort.SEVERITY
        except ValueError:
            raise ProblemError(
                422, "unknown filter value", slug=ProblemType.INVALID_REQUEST
            ) from None
        after = decode_page_cursor(resources.cursors, cursor or None, order, _CURSOR_KIND)
        where = ListFilter(
            statuses=statuses,
            severity=where_severity,
            resurfaced_only=resurfaced == "1",
            limit=PAGE_SIZE,
            sort=order,
            after=after,
        )
        async with resources.operator.acquire() as conn:
            repository = TriageRepository(conn)
            page = await repository.page(where)
            counts = await repository.counts()
            history = await repository.failure_history([r.cluster_id for r in page.rows])
        next_cursor = encode_page_cursor(resources.cursors, page.next_key, order, _CURSOR_KIND)
        return console.page(
            request,
            "clusters.html",
            principal,
            section="clusters",
            rows=page.rows,
            sparks={
                r.cluster_id: sparkline(
                    [count for _, count in history.get(r.cluster_id, ())],
                    label=f"failures per signalled hour, last 8 days (now {r.failure_count})",
                )
                for r in page.rows
            },
            next_cursor=next_cursor,
            filters={
                "status": view,
                "severity": severity or "",
                "resurfaced": resurfaced == "1",
                "sort": order.value,
            },
            views=_view_counts(counts),
            by_severity=[
                (
                    s.value,
                    sum(n for (st, sev), n in counts.items() if sev == s.value and st in _OPEN),
                )
                for s in Severity
            ],
            severities=[s.value for s in Severity],
            sorts=[s.value for s in Sort],
        )

    async def detail_page(
        request: Request,
        principal: Principal,
        cluster_id: UUID,
        *,
        status_code: int = 200,
        **context: object,
    ) -> HTMLResponse:
        try:
            async with resources.operator.acquire() as conn:
                repository = TriageRepository(conn)
                detail = await repository.get(cluster_id)
                history = (await repository.failure_history([cluster_id])).get(cluster_id, ())
        except ClusterNotFoundError as exc:
            raise not_found(str(exc)) from None
        return console.page(
            request,
            "cluster.html",
            principal,
            status_code=status_code,
            section="clusters",
            c=detail,
            hidden=list(hidden_characters(detail.texts())),
            chart=time_chart(
                [Point(at, count) for at, count in history],
                title="Failures over time (the count of the first snapshot of each hour it was "
                "signalled, last 8 days)",
                y_label="failures",
            ),
            allowed=[s.value for s in allowed_from(detail.status)],
            can_write=principal.allows(TRIAGE_WRITE),
            notes_max=NOTES_MAX_CHARS,
            **context,
        )

    @pages.get("/clusters/{cluster_id}")
    async def console_cluster(
        *,
        request: Request,
        cluster_id: UUID,
        principal: Principal = reader,
        saved: Annotated[str | None, Query(max_length=5)] = None,
    ) -> HTMLResponse:
        return await detail_page(request, principal, cluster_id, saved=saved == "1")

    @pages.post("/clusters/{cluster_id}")
    async def console_triage(
        *,
        request: Request,
        cluster_id: UUID,
        principal: Principal = writer,
        version: Annotated[int, Form(ge=0)],
        csrf: Annotated[str, Form(max_length=200)] = "",
        status: Annotated[str, Form(max_length=20)] = "",
        assignee: Annotated[str, Form(max_length=64)] = "",
        notes: Annotated[str, Form(max_length=NOTES_MAX_CHARS)] = "",
    ) -> Response:
        check_csrf(request, csrf)
        try:
            target = Status(status) if status else None
            assignee_id = UUID(assignee.strip()) if assignee.strip() else None
        except ValueError:
            return await detail_page(
                request,
                principal,
                cluster_id,
                status_code=422,
                error="The assignee must be a UUID (or empty) and the status one of the list.",
                draft={"status": status, "assignee": assignee, "notes": notes},
            )
        change = TriageChange(
            status=target,
            change_assignee=True,
            assignee=assignee_id,
            change_notes=True,
            notes=_blank_none(notes.replace("\r\n", "\n")),
        )
        try:
            async with resources.operator.acquire() as conn:
                await TriageRepository(conn).update(
                    cluster_id, change, expected_version=version, actor=principal.actor
                )
        except ClusterNotFoundError as exc:
            raise not_found(str(exc)) from None
        except VersionConflictError:
            return await detail_page(
                request,
                principal,
                cluster_id,
                status_code=409,
                error="Someone changed this cluster after you opened it; your change was NOT "
                "applied. The current state and its audit trail are below — apply your change "
                "again if it still stands.",
                draft={"status": status, "assignee": assignee, "notes": notes},
            )
        except TransitionError as exc:
            return await detail_page(
                request,
                principal,
                cluster_id,
                status_code=409,
                error=str(exc),
                draft={"status": status, "assignee": assignee, "notes": notes},
            )
        return RedirectResponse(f"{PREFIX}/clusters/{cluster_id}?saved=1", status_code=303)

    return pages
