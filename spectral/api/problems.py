"""Every error of the HTTP API is an RFC 9457 ``application/problem+json`` document.

    {"type": "/problems/stale-version", "title": "Stale version", "status": 412,
     "detail": "...", "instance": "/clusters/…", ...extensions}

``type`` is a relative URI naming the kind of problem (docs/reference/http-api.md lists them);
``detail`` says what to do. A problem never repeats the request's input back (a 422 lists *where*
the input is wrong and why, not the value), and a server error never shows internals (they go to the
log).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from http import HTTPStatus
from typing import Any, Final

import asyncpg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from spectral.errors import PermanentError, SpectralError, TransientError
from spectral.observability.logging import get_logger

log = get_logger(__name__)

PROBLEM_MEDIA_TYPE: Final = "application/problem+json"
_MAX_ERRORS: Final = 20


class InvalidParam(BaseModel):
    """Where a request is wrong and why (never the value sent)."""

    location: list[str | int] = Field(description='e.g. ["body", "status"], ["query", "limit"]')
    message: str
    type: str


class Problem(BaseModel):
    """RFC 9457 problem details."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(default="about:blank", description="A URI reference naming the problem.")
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None
    invalid_params: list[InvalidParam] | None = Field(
        default=None, description="For 422: each invalid part of the request."
    )


class ProblemType(StrEnum):
    """The kinds of problem the framework answers with: the last part of a document's ``type``
    (``/problems/not-found``). A feature names a kind of its own with a constant beside its
    routes (``TRANSITION_REFUSED``, ...)."""

    NOT_FOUND = "not-found"
    INVALID_REQUEST = "invalid-request"
    STALE_VERSION = "stale-version"
    IF_MATCH_REQUIRED = "if-match-required"
    UNAUTHENTICATED = "unauthenticated"
    MISSING_SCOPE = "missing-scope"
    CSRF = "csrf"
    CROSS_ORIGIN = "cross-origin"
    INVALID_CURSOR = "invalid-cursor"
    BAD_REQUEST = "bad-request"
    BODY_TIMEOUT = "body-timeout"
    BODY_TOO_LARGE = "body-too-large"
    INVALID_JSON = "invalid-json"
    NUL_CHARACTER = "nul-character"
    NOT_UTF8 = "not-utf8"
    UNSUPPORTED_MEDIA_TYPE = "unsupported-media-type"
    DRY_RUN_BUSY = "dry-run-busy"
    DRY_RUN_NOT_CONFIGURED = "dry-run-not-configured"
    UNAVAILABLE = "unavailable"
    REFUSED = "refused"
    INTERNAL = "internal"


class ProblemError(SpectralError):
    """Raise to answer with a problem document."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        slug: str | None = None,
        title: str | None = None,
        headers: Mapping[str, str] | None = None,
        **extensions: Any,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.slug = slug
        self.title = title or HTTPStatus(status).phrase
        self.headers = dict(headers or {})
        self.extensions = extensions


def not_found(detail: str) -> ProblemError:
    """404: what the request names does not exist (``detail`` says what)."""
    return ProblemError(404, detail, slug=ProblemType.NOT_FOUND)


def problem_response(
    request: Request | None,
    status: int,
    detail: str | None,
    *,
    slug: str | None = None,
    title: str | None = None,
    headers: Mapping[str, str] | None = None,
    **extensions: Any,
) -> JSONResponse:
    body: dict[str, Any] = {
        "type": f"/problems/{slug}" if slug else "about:blank",
        "title": title or HTTPStatus(status).phrase,
        "status": status,
    }
    if detail:
        body["detail"] = detail
    if request is not None:
        body["instance"] = request.url.path
    body.update({k: v for k, v in extensions.items() if v is not None})
    return JSONResponse(body, status_code=status, headers=headers, media_type=PROBLEM_MEDIA_TYPE)


def invalid_params(errors: Sequence[Any]) -> list[dict[str, Any]]:
    """Pydantic / FastAPI errors without their ``input`` and ``ctx`` (which echo the request)."""
    out = []
    for error in list(errors)[:_MAX_ERRORS]:
        location = [part if isinstance(part, int) else str(part)[:64] for part in error["loc"]]
        out.append(
            {
                "location": location,
                "message": _message(error),
                "type": str(error.get("type", "invalid")),
            }
        )
    return out


def _message(error: Mapping[str, Any]) -> str:
    """The error's message, unless it quotes the input (then a generic one of its type)."""
    message = str(error.get("msg", "invalid"))
    given = error.get("input")
    if isinstance(given, str) and given and given in message:
        return f"invalid value ({error.get('type', 'invalid')})"
    return message[:300]


def install(app: FastAPI) -> None:
    """Problem documents for every error the app can produce."""

    @app.exception_handler(ProblemError)
    async def problem(request: Request, exc: ProblemError) -> JSONResponse:
        return problem_response(
            request,
            exc.status,
            exc.detail,
            slug=exc.slug,
            title=exc.title,
            headers=exc.headers,
            **exc.extensions,
        )

    @app.exception_handler(RequestValidationError)
    async def validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return problem_response(
            request,
            422,
            "the request is not valid; see invalid_params",
            slug=ProblemType.INVALID_REQUEST,
            title="Invalid request",
            invalid_params=invalid_params(exc.errors()),
        )

    @app.exception_handler(StarletteHTTPException)
    async def http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else None
        return problem_response(request, exc.status_code, detail, headers=exc.headers)

    @app.exception_handler(TransientError)
    async def unavailable(request: Request, exc: TransientError) -> JSONResponse:
        log.warning("request failed: service unavailable", path=request.url.path, error=str(exc))
        return problem_response(
            request,
            503,
            "a backing service (database or broker) is unavailable; retry later",
            slug=ProblemType.UNAVAILABLE,
            headers={"Retry-After": "2"},
        )

    @app.exception_handler(PermanentError)
    async def refused(request: Request, exc: PermanentError) -> JSONResponse:
        if isinstance(exc.__cause__, asyncpg.PostgresError | asyncpg.InterfaceError):
            # The database refused what the API let through: a defect of the API, not of the
            # request. The driver's text stays in the log.
            return await crashed(request, exc)
        log.info("request refused", path=request.url.path, error=str(exc))
        return problem_response(request, 400, _first_line(str(exc)), slug=ProblemType.REFUSED)

    @app.exception_handler(Exception)
    async def crashed(request: Request, exc: Exception) -> JSONResponse:
        log.error(
            "request failed",
            path=request.url.path,
            error_type=type(exc).__name__,
            exc_info=exc,
        )
        return problem_response(
            request,
            500,
            "the server failed to answer; the error is logged",
            slug=ProblemType.INTERNAL,
        )


def _first_line(text: str) -> str:
    """The first line of a message, at most 300 characters (no multi-line driver dumps)."""
    return text.splitlines()[0][:300] if text else "refused"


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for these error statuses, each a problem document."""
    return {
        status: {
            "description": _DESCRIPTIONS.get(status, HTTPStatus(status).phrase),
            "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }


_DESCRIPTIONS: Final = {
    400: "Refused: the request is well-formed but cannot be carried out as it is (e.g. a "
    "malformed cursor, NUL or a lone surrogate in the request, a body that is not UTF-8 JSON).",
    401: "No valid token: missing, malformed, unknown, revoked or expired. "
    "Send `Authorization: Bearer spt_…`.",
    403: "The token is valid but lacks the scope this operation needs (named in the problem).",
    404: "No such resource.",
    408: "The request body did not arrive in time.",
    409: "Conflicts with the current state (the problem says which).",
    412: "If-Match does not match the current version: reload and apply your change again.",
    413: "The request body is larger than the limit.",
    415: "The body's media type is not accepted (JSON for the API, urlencoded forms for the "
    "console).",
    422: "The request does not validate; invalid_params lists where and why.",
    428: "This operation needs an If-Match header with the version you edited.",
    500: "The server failed; the problem carries no internals (they are logged).",
    501: "This server is not set up to offer this operation (the problem says what it needs).",
    503: "A backing service is unavailable; retry after the Retry-After seconds.",
}

COMMON: Final = (400, 401, 403, 408, 413, 422, 500, 503)
"""Statuses any authenticated operation can answer."""
