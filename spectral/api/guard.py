"""The first thing every HTTP request meets: size and text checks before any route runs.

* A body larger than ``max_body_bytes`` is refused with 413 — from its Content-Length before a
  byte is read, or as soon as a chunked body passes the limit (memory stays bounded).
* A body not received in full within ``body_timeout`` seconds is refused with 408: the body is
  read before any route (and its authentication) runs, so without a deadline anyone could hold
  connections open by sending a byte now and then.
* The path and the query string must be UTF-8 without NUL (PostgreSQL text cannot hold U+0000,
  and an undecodable byte is not text): 400.
* A JSON body must be UTF-8 JSON without lone surrogates (orjson's strict parse; nesting deeper
  than its limit is refused too): 400; a string or key holding NUL: 422 naming where.
* A form body (the web console) gets the query string's checks. Forms are
  ``application/x-www-form-urlencoded`` (what a browser sends for the console's forms, which
  upload nothing): a ``multipart/form-data`` body is refused with 415, so no field reaches a
  route without the same NUL and UTF-8 checks.

Each refusal is an ``application/problem+json`` document that never repeats the input.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final
from urllib.parse import unquote_to_bytes

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from spectral.api.problems import ProblemType, problem_response

DEFAULT_MAX_BODY_BYTES: Final = 1024 * 1024
DEFAULT_BODY_TIMEOUT: Final = 30.0
_BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class _Refused(Exception):  # noqa: N818 - a control-flow signal, not an error type
    def __init__(self, status: int, detail: str, slug: str, **extensions: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.slug = slug
        self.extensions = extensions


class RequestGuard:
    """ASGI middleware enforcing the checks above."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        body_timeout: float = DEFAULT_BODY_TIMEOUT,
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout = body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            _check_text(scope.get("raw_path") or scope["path"].encode(), "path")
            _check_text(scope.get("query_string", b""), "query string")
            body_receive = receive
            if scope["method"] in _BODY_METHODS:
                try:
                    async with asyncio.timeout(self.body_timeout):
                        body = await self._read_body(scope, receive)
                except TimeoutError:
                    raise _Refused(
                        408,
                        f"the request body did not arrive within {self.body_timeout:g} seconds",
                        ProblemType.BODY_TIMEOUT,
                    ) from None
                _check_body(_content_type(scope), body)
                body_receive = _replay(body, receive)
        except _Refused as refused:
            response = problem_response(
                None, refused.status, refused.detail, slug=refused.slug, **refused.extensions
            )
            await response(scope, receive, send)
            return
        await self.app(scope, body_receive, send)

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes:
        declared = _header(scope, b"content-length")
        if declared is not None:
            try:
                length = int(declared)
            except ValueError:
                raise _Refused(
                    400, "Content-Length is not a number", ProblemType.BAD_REQUEST
                ) from None
            if length > self.max_body_bytes:
                raise self._too_large()
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise self._too_large()
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    def _too_large(self) -> _Refused:
        return _Refused(
            413,
            f"the request body is larger than {self.max_body_bytes} bytes",
            ProblemType.BODY_TOO_LARGE,
            max_body_bytes=self.max_body_bytes,
        )


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def _content_type(scope: Scope) -> str:
    return (_header(scope, b"content-type") or "").split(";")[0].strip().lower()


def _check_text(raw: bytes, where: str) -> None:
    """Percent-decoded ``raw`` must be UTF-8 without NUL."""
    decoded = unquote_to_bytes(raw.replace(b"+", b" "))
    if b"\x00" in decoded:
        raise _Refused(400, f"the {where} contains a NUL character", ProblemType.NUL_CHARACTER)
    try:
        decoded.decode("utf-8")
    except UnicodeDecodeError:
        raise _Refused(400, f"the {where} is not valid UTF-8", ProblemType.NOT_UTF8) from None


def _check_body(content_type: str, body: bytes) -> None:
    if not body:
        return
    if content_type == "application/json" or content_type.endswith("+json"):
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise _Refused(
                400,
                "the body is not valid JSON in UTF-8 (lone surrogates and nesting deeper than "
                "1,024 levels are refused too)",
                ProblemType.INVALID_JSON,
            ) from None
        where = _nul_in(value, ["body"])
        if where is not None:
            raise _Refused(
                422,
                "text must not contain NUL (U+0000)",
                ProblemType.INVALID_REQUEST,
                title="Invalid request",
                invalid_params=[
                    {"location": where, "message": "contains NUL (U+0000)", "type": "nul"}
                ],
            )
    elif content_type == "application/x-www-form-urlencoded":
        _check_text(body, "form")
    elif content_type.startswith("multipart/"):
        raise _Refused(
            415,
            "forms are sent as application/x-www-form-urlencoded (nothing here takes uploads)",
            ProblemType.UNSUPPORTED_MEDIA_TYPE,
        )


def _nul_in(value: Any, path: list[str | int]) -> list[str | int] | None:
    """Where in a parsed JSON value a string or key holds NUL (iterative: no recursion limit).

    Each value visited keeps only its step and its parent's index; the path is spelled out for
    the value found alone, so the walk costs time linear in the value (a path copied per value
    made a value nested N deep cost N² steps)."""
    steps: list[tuple[str | int, int]] = []
    stack: list[tuple[Any, int]] = [(value, -1)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return _path_to(steps, at, path)
        elif isinstance(item, dict):
            for key, child in item.items():
                if "\x00" in key:
                    return _path_to(steps, at, path)
                steps.append((key[:64], at))
                stack.append((child, len(steps) - 1))
        elif isinstance(item, list):
            for i, child in enumerate(item):
                steps.append((i, at))
                stack.append((child, len(steps) - 1))
    return None


def _path_to(steps: list[tuple[str | int, int]], at: int, path: list[str | int]) -> list[str | int]:
    found: list[str | int] = []
    while at >= 0:
        step, at = steps[at]
        found.append(step)
    return [*path, *reversed(found)]
