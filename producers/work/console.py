"""Thread pages of the web console (ADR-035 §11: what they show derives only from stored
documents and thread metadata): a project's threads, one thread with its child summary and
items, and the ledger timeline of its items."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse

from producers.work.schemas import EntryOut, HistoryOut, ThreadBrief, ThreadOut
from spectral.api.auth import console_requires
from spectral.api.problems import ProblemError
from spectral.api.resources import Resources
from spectral.auth.scopes import Scope
from spectral.auth.tokens import Principal
from spectral.console.site import PREFIX, Console
from spectral.work.history import reconstruct
from spectral.work.identity import IDENTIFIER_PATTERN
from spectral.work.read import WorkReader


def router(console: Console, resources: Resources) -> APIRouter:
    pages = APIRouter(prefix=PREFIX, include_in_schema=False)
    reader = Depends(console_requires(resources, Scope.WORK_READ))

    @pages.get("/threads")
    async def console_threads(
        *,
        request: Request,
        principal: Principal = reader,
        project: Annotated[str | None, Query(max_length=128, pattern=IDENTIFIER_PATTERN)] = None,
        active: Annotated[str | None, Query(max_length=5)] = None,
    ) -> HTMLResponse:
        threads: list[ThreadBrief] = []
        if project:
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
        )

    @pages.get("/threads/{thread_id}")
    async def console_thread(
        *, request: Request, thread_id: UUID, principal: Principal = reader
    ) -> HTMLResponse:
        work = WorkReader(resources.operator)
        view = await work.thread(thread_id)
        if view is None:
            raise ProblemError(404, f"no thread {thread_id}", slug="not-found")
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
        )

    return pages
