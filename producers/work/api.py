"""The work endpoints of the HTTP API (ADR-035 §12), composed into the app by spectral/cli/api.py.

Commands (scope ``work:submit``; the token's principal is recorded on the threads created):
    POST /commands/story-backlog/generate-epic, POST .../generate-all
        -> {thread_id, status, disposition}: 202 + Location: /threads/{id} when work was
           enqueued, 200 when an existing thread answers (idempotent by semantic identity)
    PUT  /projects/{project_id}/documents/{document_id}
        -> 201 created, 200 content identical to the current version; 409
           ``document-immutable`` (with ``current_version``) for any other content, at any
           version: documents change only through mutations (ADR-035 §5.4), never by PUT
Cancellation (scope ``work:cancel``):
    POST /threads/{thread_id}/cancel {reason?}
        -> 200 when the thread is closed (canceled now, or already closed), 202 while items in
           flight finish their calls (their answers are recorded, not applied); idempotent
Budgets (read: ``work:read``; change: ``work:budget``):
    GET /budgets?scope_kind=, GET /orgs/{org_id}/budget, PUT /orgs/{org_id}/budget {period,
    token_limit?, cost_limit?}, DELETE /orgs/{org_id}/budget; nested scopes the same way at
    /budgets/{scope_kind}/{scope_id} (org, project, thread, route) — a change resumes the items
    that budget parked
Observation (scope ``work:read``; polling, ADR-035 §4):
    GET /threads/{thread_id} (with child_summary), GET /threads/{thread_id}/history,
    GET /projects/{project_id}/threads?active=&limit=&cursor=, GET /documents/{document_id}

Commands act as ``spectral_producer``, reads as ``spectral_operator`` (read only on work.*).
"""

from __future__ import annotations

from typing import Annotated, Any, Final
from uuid import UUID

from fastapi import APIRouter, Depends, Header, Path, Query, Response, status

from producers.work.budgets import ROUTE_MAX_LENGTH, BudgetCommands, check_scope
from producers.work.cancel import Disposition as CancelDisposition
from producers.work.cancel import UnknownThreadError, cancel_thread
from producers.work.commands import (
    DocumentConflictError,
    UnknownTargetError,
    WorkCommands,
)
from producers.work.domain.budgets import Scope, ScopeKind
from producers.work.domain.documents import InvalidDocumentError, StoryBacklog
from producers.work.domain.history import reconstruct
from producers.work.domain.identity import IDENTIFIER_PATTERN
from producers.work.domain.read import WorkReader
from producers.work.domain.settings import WorkSettings
from producers.work.plugin import WORK_BUDGET, WORK_CANCEL, WORK_READ, WORK_SUBMIT
from producers.work.policy import Disposition
from producers.work.schemas import (
    BudgetChangeOut,
    BudgetIn,
    BudgetList,
    BudgetOut,
    CancelRequest,
    CancelResponse,
    CommandResponse,
    DocumentOut,
    GenerateAllRequest,
    GenerateEpicRequest,
    HistoryOut,
    ThreadBrief,
    ThreadList,
    ThreadOut,
)
from spectral.api.auth import requires
from spectral.api.conditional import (
    ETAG_HEADER,
    NOT_MODIFIED,
    etag_of,
    not_modified,
    not_modified_response,
)
from spectral.api.cursor import utc_timestamp, uuid_text
from spectral.api.problems import COMMON, ProblemError, ProblemType, not_found, responses
from spectral.api.resources import Resources
from spectral.auth.tokens import Principal
from spectral.errors import TransientError

_CURSOR_KIND: Final = "project-threads"
IdentifierPath = Annotated[str, Path(pattern=IDENTIFIER_PATTERN, max_length=128)]
ScopePath = Annotated[str, Path(min_length=1, max_length=ROUTE_MAX_LENGTH)]

_LOCATION: Final = {"description": "/threads/{thread_id}", "schema": {"type": "string"}}
_ENQUEUED: Final[dict[int | str, dict[str, Any]]] = {
    202: {
        "description": "Work was enqueued (a new or reopened thread); poll Location.",
        "headers": {"Location": _LOCATION},
        "model": CommandResponse,
    },
}

DOCUMENT_IMMUTABLE: Final = "document-immutable"
"""The problem type of a put that would change a document (documents change by mutation)."""
INVALID_DOCUMENT: Final = "invalid-document"
"""The problem type of a document that does not validate."""


def _enqueued(response: Response, body: CommandResponse) -> CommandResponse:
    if body.disposition in (Disposition.CREATED.value, Disposition.RETRIED.value):
        response.status_code = status.HTTP_202_ACCEPTED
        response.headers["Location"] = f"/threads/{body.thread_id}"
    return body


def _document_out(view: Any, *, created: bool | None = None) -> DocumentOut:
    return DocumentOut(
        document_id=view.document_id,
        project_id=view.project_id,
        doc_type=view.doc_type,
        version=view.version,
        content=dict(view.content),
        created=created,
    )


async def project_threads_page(
    resources: Resources, project_id: str, *, active: bool, limit: int, cursor: str | None
) -> ThreadList:
    """One page of a project's threads, newest first (the API's and the MCP tool's answer)."""
    after = None
    if cursor is not None:
        at, tid = resources.cursors.decode_keyset(cursor, _CURSOR_KIND, utc_timestamp, uuid_text)
        after = (at, tid)
    threads = await WorkReader(resources.operator).project_threads(
        project_id, active=active, limit=limit + 1, after=after
    )
    page = threads[:limit]
    next_cursor = None
    if len(threads) > limit:
        last = page[-1]
        next_cursor = resources.cursors.encode(
            _CURSOR_KIND, [last.created_at.isoformat(), str(last.thread_id)]
        )
    return ThreadList(threads=[ThreadBrief.of(t) for t in page], next_cursor=next_cursor)


def router(resources: Resources) -> APIRouter:  # noqa: C901 - one nested function per route
    api = APIRouter()
    submitter = Depends(requires(resources, WORK_SUBMIT))
    reader = Depends(requires(resources, WORK_READ))

    def commands() -> WorkCommands:
        return WorkCommands(
            resources.producer,
            priority_step_seconds=WorkSettings.of(resources.settings).work_priority_step_seconds,
        )

    def work_reader() -> WorkReader:
        return WorkReader(resources.operator)

    @api.post(
        "/commands/story-backlog/generate-epic",
        tags=["commands"],
        summary="Generate the stories of one epic (idempotent by semantic identity).",
        responses={**_ENQUEUED, **responses(*COMMON, 404)},
    )
    async def generate_epic(
        *, body: GenerateEpicRequest, response: Response, principal: Principal = submitter
    ) -> CommandResponse:
        try:
            result = await commands().generate_epic(body.command(principal.actor))
        except UnknownTargetError as exc:
            raise not_found(str(exc)) from None
        return _enqueued(response, CommandResponse.of(result))

    @api.post(
        "/commands/story-backlog/generate-all",
        tags=["commands"],
        summary="Generate the stories of every epic (or the listed ones): an orchestration.",
        responses={**_ENQUEUED, **responses(*COMMON, 404)},
    )
    async def generate_all(
        *, body: GenerateAllRequest, response: Response, principal: Principal = submitter
    ) -> CommandResponse:
        try:
            result = await commands().generate_all(body.command(principal.actor))
        except UnknownTargetError as exc:
            raise not_found(str(exc)) from None
        return _enqueued(response, CommandResponse.of(result))

    @api.get(
        "/threads/{thread_id}",
        tags=["observation"],
        summary="A thread: status, target, items, child_summary for orchestrations.",
        responses=responses(*COMMON, 404),
    )
    async def get_thread(*, thread_id: UUID, _: Principal = reader) -> ThreadOut:
        view = await work_reader().thread(thread_id)
        if view is None:
            raise not_found(f"no thread {thread_id}")
        return ThreadOut.of_view(view)

    @api.get(
        "/threads/{thread_id}/history",
        tags=["observation"],
        summary="The execution reconstructed from the ledger alone.",
        responses=responses(*COMMON, 404),
    )
    async def get_thread_history(*, thread_id: UUID, _: Principal = reader) -> HistoryOut:
        entries = await work_reader().thread_ledger(thread_id)
        if entries is None:
            raise not_found(f"no thread {thread_id}")
        return HistoryOut.of(thread_id, entries, reconstruct(entries))

    @api.get(
        "/projects/{project_id}/threads",
        tags=["observation"],
        summary="Threads of a project, newest first, paged by cursor.",
        responses=responses(*COMMON),
    )
    async def list_project_threads(
        *,
        project_id: IdentifierPath,
        _: Principal = reader,
        active: Annotated[bool, Query(description="Only open and running threads.")] = False,
        limit: Annotated[int, Query(ge=1, le=500)] = 100,
        cursor: Annotated[str | None, Query(max_length=512)] = None,
    ) -> ThreadList:
        return await project_threads_page(
            resources, project_id, active=active, limit=limit, cursor=cursor
        )

    @api.put(
        "/projects/{project_id}/documents/{document_id}",
        tags=["documents"],
        summary=(
            "Create a story backlog (version 1); the current content again is a no-op, any "
            "other content 409."
        ),
        responses={
            200: {"headers": ETAG_HEADER},
            201: {
                "description": "Created (version 1).",
                "model": DocumentOut,
                "headers": {
                    **ETAG_HEADER,
                    "Location": {"description": "/documents/{id}", "schema": {"type": "string"}},
                },
            },
            **responses(*COMMON, 409),
        },
    )
    async def put_document(
        *,
        project_id: IdentifierPath,
        document_id: IdentifierPath,
        body: StoryBacklog,
        response: Response,
        _: Principal = submitter,
    ) -> DocumentOut:
        content: dict[str, Any] = body.model_dump(mode="json")
        try:
            ref = await commands().put_document(project_id, document_id, content)
        except DocumentConflictError as exc:
            raise ProblemError(
                409,
                f"{exc}: documents change only through mutations (generate commands), never by PUT",
                slug=DOCUMENT_IMMUTABLE,
                current_version=exc.current_version,
                document=f"/documents/{document_id}",
            ) from None
        except InvalidDocumentError as exc:
            raise ProblemError(422, str(exc)[:300], slug=INVALID_DOCUMENT) from None
        if ref.created:
            response.status_code = status.HTTP_201_CREATED
            response.headers["Location"] = f"/documents/{document_id}"
        view = await work_reader().document(document_id)
        if view is None:
            raise TransientError("the document is not readable yet")
        response.headers["ETag"] = etag_of(view.version)
        return _document_out(view, created=ref.created)

    @api.get(
        "/documents/{document_id}",
        tags=["documents"],
        summary="A document at its current version (ETag: the version).",
        response_model=DocumentOut,
        responses={200: {"headers": ETAG_HEADER}, **NOT_MODIFIED, **responses(*COMMON, 404)},
    )
    async def get_document(
        *,
        document_id: IdentifierPath,
        response: Response,
        _: Principal = reader,
        if_none_match: Annotated[
            str | None,
            Header(description='An ETag you hold, e.g. "2": 304 while it is still current.'),
        ] = None,
    ) -> Any:
        view = await work_reader().document(document_id)
        if view is None:
            raise not_found(f"no document {document_id!r}")
        if not_modified(if_none_match, view.version):
            return not_modified_response(view.version)
        response.headers["ETag"] = etag_of(view.version)
        return _document_out(view)

    _governance(api, resources)
    return api


def _governance(api: APIRouter, resources: Resources) -> None:  # noqa: C901 - a function per route
    """Cancellation and budgets."""
    reader = Depends(requires(resources, WORK_READ))
    canceler = Depends(requires(resources, WORK_CANCEL))
    budgeter = Depends(requires(resources, WORK_BUDGET))

    @api.post(
        "/threads/{thread_id}/cancel",
        tags=["commands"],
        summary="Cancel a thread (a generate-all with its whole tree); idempotent.",
        responses={
            202: {
                "description": "Cancellation asked for: items whose call is in flight end "
                "canceled when it answers (the answer is recorded, not applied).",
                "model": CancelResponse,
                "headers": {"Location": _LOCATION},
            },
            **responses(*COMMON, 404),
        },
    )
    async def cancel_work_thread(
        *,
        thread_id: UUID,
        response: Response,
        body: CancelRequest | None = None,
        principal: Principal = canceler,
    ) -> CancelResponse:
        try:
            result = await cancel_thread(
                resources.producer,
                thread_id,
                reason=body.reason if body is not None else None,
                requested_by=principal.actor,
            )
        except UnknownThreadError as exc:
            raise not_found(str(exc)) from None
        if result.disposition is CancelDisposition.CANCELING or (
            result.disposition is CancelDisposition.ALREADY_REQUESTED and not result.status.terminal
        ):
            response.status_code = status.HTTP_202_ACCEPTED
            response.headers["Location"] = f"/threads/{thread_id}"
        return CancelResponse.of(result)

    @api.get(
        "/budgets",
        tags=["budgets"],
        summary="Every budget (org, project, thread, route) with its spend in the current period.",
        responses=responses(*COMMON),
    )
    async def list_budgets(
        *,
        scope_kind: Annotated[
            ScopeKind | None, Query(description="Only budgets of this scope kind.")
        ] = None,
        _: Principal = reader,
    ) -> BudgetList:
        views = await BudgetCommands(resources.operator).all(scope_kind)
        return BudgetList(budgets=[BudgetOut.of(v) for v in views])

    def scope_of(scope_kind: ScopeKind, scope_id: str) -> Scope:
        try:
            return check_scope(scope_kind, scope_id)
        except ValueError as exc:
            raise ProblemError(422, str(exc), slug=ProblemType.INVALID_REQUEST) from None

    async def set_budget(
        scope: str | Scope, body: BudgetIn, principal: Principal
    ) -> BudgetChangeOut:
        try:
            change = await BudgetCommands(resources.producer).set(
                scope,
                body.period,
                token_limit=body.token_limit,
                cost_limit=body.cost_limit,
                requested_by=principal.actor,
            )
        except ValueError as exc:
            raise ProblemError(422, str(exc), slug=ProblemType.INVALID_REQUEST) from None
        return BudgetChangeOut.of(change)

    @api.get(
        "/budgets/{scope_kind}/{scope_id:path}",
        tags=["budgets"],
        summary="A budget of any scope (org, project, thread, route), its spend in the current "
        "period and the items it parked.",
        responses=responses(*COMMON, 404, 422),
    )
    async def get_scope_budget(
        *, scope_kind: ScopeKind, scope_id: ScopePath, _: Principal = reader
    ) -> BudgetOut:
        scope = scope_of(scope_kind, scope_id)
        view = await BudgetCommands(resources.operator).get(scope)
        if view is None:
            raise not_found(f"{scope_kind.value} {scope_id!r} has no budget (not limited)")
        return BudgetOut.of(view)

    @api.put(
        "/budgets/{scope_kind}/{scope_id:path}",
        tags=["budgets"],
        summary="Set the budget of a scope (org, project, thread, route); the items it parked "
        "resume.",
        responses=responses(*COMMON, 422),
    )
    async def put_scope_budget(
        *,
        scope_kind: ScopeKind,
        scope_id: ScopePath,
        body: BudgetIn,
        principal: Principal = budgeter,
    ) -> BudgetChangeOut:
        return await set_budget(scope_of(scope_kind, scope_id), body, principal)

    @api.delete(
        "/budgets/{scope_kind}/{scope_id:path}",
        tags=["budgets"],
        summary="Remove the budget of a scope (no limit); the items it parked resume.",
        responses=responses(*COMMON, 404, 422),
    )
    async def delete_scope_budget(
        *, scope_kind: ScopeKind, scope_id: ScopePath, principal: Principal = budgeter
    ) -> BudgetChangeOut:
        scope = scope_of(scope_kind, scope_id)
        change = await BudgetCommands(resources.producer).remove(
            scope, requested_by=principal.actor
        )
        if change is None:
            raise not_found(f"{scope_kind.value} {scope_id!r} has no budget")
        return BudgetChangeOut.of(change)

    @api.get(
        "/orgs/{org_id}/budget",
        tags=["budgets"],
        summary="An org's budget, its spend in the current period and its parked items.",
        responses=responses(*COMMON, 404),
    )
    async def get_budget(*, org_id: IdentifierPath, _: Principal = reader) -> BudgetOut:
        view = await BudgetCommands(resources.operator).get(org_id)
        if view is None:
            raise not_found(f"org {org_id!r} has no budget (not limited)")
        return BudgetOut.of(view)

    @api.put(
        "/orgs/{org_id}/budget",
        tags=["budgets"],
        summary="Set an org's budget; its parked items resume.",
        responses=responses(*COMMON),
    )
    async def put_budget(
        *, org_id: IdentifierPath, body: BudgetIn, principal: Principal = budgeter
    ) -> BudgetChangeOut:
        return await set_budget(org_id, body, principal)

    @api.delete(
        "/orgs/{org_id}/budget",
        tags=["budgets"],
        summary="Remove an org's budget (no limit); its parked items resume.",
        responses=responses(*COMMON, 404),
    )
    async def delete_budget(
        *, org_id: IdentifierPath, principal: Principal = budgeter
    ) -> BudgetChangeOut:
        change = await BudgetCommands(resources.producer).remove(
            org_id, requested_by=principal.actor
        )
        if change is None:
            raise not_found(f"org {org_id!r} has no budget")
        return BudgetChangeOut.of(change)
