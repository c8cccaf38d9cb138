"""The HTTP API of ADR-035 §12 on FastAPI (OpenAPI at ``/openapi.json``, docs at ``/docs``).

Commands:     POST /commands/story-backlog/generate-epic, POST .../generate-all
              -> {thread_id, status, disposition}; 202 when work was enqueued, 200 otherwise.
Observation:  GET /threads/{thread_id} (with child_summary), GET /threads/{thread_id}/history,
              GET /projects/{project_id}/threads?active=true
Documents:    PUT /projects/{project_id}/documents/{document_id}, GET /documents/{document_id}

Polling is the observation model (ADR-035 §4). ``create_app`` takes ready services (tests) or a
database URL, in which case the app opens its pool (role ``spectral_producer``) on startup.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any
from uuid import UUID

from fastapi import FastAPI, HTTPException, Query, Request, Response, status
from fastapi.responses import JSONResponse

from producers.work.commands import (
    DocumentConflictError,
    GenerateAll,
    GenerateEpic,
    UnknownTargetError,
    WorkCommands,
)
from producers.work.policy import Disposition
from producers.work.schemas import (
    CommandResponse,
    DocumentOut,
    GenerateAllRequest,
    GenerateEpicRequest,
    HistoryOut,
    ThreadBrief,
    ThreadList,
    ThreadOut,
)
from spectral.db.connect import create_pool
from spectral.errors import PermanentError, TransientError
from spectral.work.documents import InvalidDocumentError, StoryBacklog
from spectral.work.history import reconstruct
from spectral.work.read import WorkReader

ROLE = "spectral_producer"


@dataclass(frozen=True)
class ApiServices:
    commands: WorkCommands
    reader: WorkReader


def create_app(services: ApiServices | None = None, *, database_url: str | None = None) -> FastAPI:
    if services is None and database_url is None:
        raise ValueError("give the services or a database URL")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if services is not None:
            app.state.services = services
            yield
            return
        assert database_url is not None  # noqa: S101 - checked above
        pool = await create_pool(database_url, role=ROLE, max_size=10)
        app.state.services = ApiServices(WorkCommands(pool), WorkReader(pool))
        try:
            yield
        finally:
            await pool.close()

    app = FastAPI(
        title="spectral work API",
        version="1",
        description="Durable LLM work (ADR-035): commands open threads, observation by polling.",
        lifespan=lifespan,
    )
    _errors(app)
    _routes(app)
    return app


def _services(request: Request) -> ApiServices:
    services: ApiServices = request.app.state.services
    return services


def _errors(app: FastAPI) -> None:
    @app.exception_handler(UnknownTargetError)
    async def unknown(_: Request, exc: UnknownTargetError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=status.HTTP_404_NOT_FOUND)

    @app.exception_handler(DocumentConflictError)
    async def conflict(_: Request, exc: DocumentConflictError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=status.HTTP_409_CONFLICT)

    @app.exception_handler(InvalidDocumentError)
    async def invalid(_: Request, exc: InvalidDocumentError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)

    @app.exception_handler(TransientError)
    async def unavailable(_: Request, exc: TransientError) -> JSONResponse:
        return JSONResponse(
            {"detail": str(exc)},
            status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": "1"},
        )

    @app.exception_handler(PermanentError)
    async def refused(_: Request, exc: PermanentError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=status.HTTP_400_BAD_REQUEST)


def _enqueued(response: Response, body: CommandResponse) -> CommandResponse:
    if body.disposition in (Disposition.CREATED.value, Disposition.RETRIED.value):
        response.status_code = status.HTTP_202_ACCEPTED
    return body


def _routes(app: FastAPI) -> None:  # noqa: C901 - one nested function per route
    @app.post("/commands/story-backlog/generate-epic", tags=["commands"])
    async def generate_epic(
        body: GenerateEpicRequest, request: Request, response: Response
    ) -> CommandResponse:
        result = await _services(request).commands.generate_epic(
            GenerateEpic(
                project_id=body.project_id,
                document_id=body.story_backlog_id,
                epic_id=body.epic_id,
                force=body.force,
                org_id=body.org_id,
            )
        )
        return _enqueued(response, CommandResponse.of(result))

    @app.post("/commands/story-backlog/generate-all", tags=["commands"])
    async def generate_all(
        body: GenerateAllRequest, request: Request, response: Response
    ) -> CommandResponse:
        result = await _services(request).commands.generate_all(
            GenerateAll(
                project_id=body.project_id,
                document_id=body.story_backlog_id,
                epic_ids=tuple(body.epic_ids) if body.epic_ids is not None else None,
                continue_on_error=body.continue_on_error,
                force=body.force,
                org_id=body.org_id,
            )
        )
        return _enqueued(response, CommandResponse.of(result))

    @app.get("/threads/{thread_id}", tags=["observation"])
    async def get_thread(thread_id: UUID, request: Request) -> ThreadOut:
        view = await _services(request).reader.thread(thread_id)
        if view is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no thread {thread_id}")
        return ThreadOut.of_view(view)

    @app.get("/threads/{thread_id}/history", tags=["observation"])
    async def get_history(thread_id: UUID, request: Request) -> HistoryOut:
        entries = await _services(request).reader.thread_ledger(thread_id)
        if entries is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no thread {thread_id}")
        return HistoryOut.of(thread_id, entries, reconstruct(entries))

    @app.get("/projects/{project_id}/threads", tags=["observation"])
    async def project_threads(
        project_id: str,
        request: Request,
        active: Annotated[bool, Query(description="Only open and running threads.")] = False,
        limit: Annotated[int, Query(ge=1, le=1000)] = 200,
    ) -> ThreadList:
        threads = await _services(request).reader.project_threads(
            project_id, active=active, limit=limit
        )
        return ThreadList(threads=[ThreadBrief.of(t) for t in threads])

    @app.put("/projects/{project_id}/documents/{document_id}", tags=["documents"])
    async def put_document(
        project_id: str, document_id: str, body: StoryBacklog, request: Request, response: Response
    ) -> DocumentOut:
        content: dict[str, Any] = body.model_dump(mode="json")
        ref = await _services(request).commands.put_document(project_id, document_id, content)
        if ref.created:
            response.status_code = status.HTTP_201_CREATED
        view = await _services(request).reader.document(document_id)
        if view is None:
            raise TransientError("the document is not readable yet")
        return DocumentOut(
            document_id=view.document_id,
            project_id=view.project_id,
            doc_type=view.doc_type,
            version=view.version,
            content=dict(view.content),
            created=ref.created,
        )

    @app.get("/documents/{document_id}", tags=["documents"])
    async def get_document(document_id: str, request: Request) -> DocumentOut:
        view = await _services(request).reader.document(document_id)
        if view is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no document {document_id!r}")
        return DocumentOut(
            document_id=view.document_id,
            project_id=view.project_id,
            doc_type=view.doc_type,
            version=view.version,
            content=dict(view.content),
        )
