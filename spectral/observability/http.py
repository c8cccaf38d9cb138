"""What the HTTP surfaces (the API with the console, MCP over HTTP) tell about their requests:
RED metrics and a structured access log, from one ASGI middleware.

Metrics (labels from fixed sets, whatever the requests: the route is the matched route's
template — ``/threads/{thread_id}`` — or ``unmatched``; the method one of the standard ones or
``OTHER``; the status its class):

* ``spectral_http_requests_total{server, route, method, status_class}``;
* ``spectral_http_request_duration_seconds{server, route, method}`` (a histogram);
* ``spectral_http_auth_failures_total{server, route, reason}``: ``authentication`` (401: no
  token, or an unknown, revoked or expired one) and ``authorization`` (403: a token without the
  scope the operation needs, a console form without its CSRF field);
* ``spectral_http_requests_in_flight{server}``.

The access log is one line per request (``event: "request"``; JSON with
``SPECTRAL_LOG_FORMAT=json``) with the method, the route, the path without its query string,
the status, the duration and the client's address — never a header, a cookie, a query string or
a body, which is where tokens travel. ``/healthz`` and ``/readyz`` are answered in front of this
(health.py) and so neither counted nor logged: probes would drown the requests.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from spectral.observability.logging import get_logger

log = get_logger("spectral.access")

METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
UNMATCHED: Final = "unmatched"
AUTH_FAILURES: Final = {401: "authentication", 403: "authorization"}
DURATION_BUCKETS: Final = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip


class HttpMetrics:
    """The instruments of one HTTP server (``server``: ``api``, ``mcp``)."""

    def __init__(self, registry: CollectorRegistry, server: str) -> None:
        self.server = server
        self.requests = Counter(
            "spectral_http_requests_total",
            "HTTP requests answered, by route template, method and status class.",
            ["server", "route", "method", "status_class"],
            registry=registry,
        )
        self.duration = Histogram(
            "spectral_http_request_duration_seconds",
            "From the request's arrival to the end of its response, by route template and method.",
            ["server", "route", "method"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.auth_failures = Counter(
            "spectral_http_auth_failures_total",
            "Requests refused for their credentials: authentication (401) or authorization (403).",
            ["server", "route", "reason"],
            registry=registry,
        )
        self.in_flight = Gauge(
            "spectral_http_requests_in_flight",
            "Requests being answered now.",
            ["server"],
            registry=registry,
        ).labels(server)

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(self.server, route, method, f"{status // 100}xx").inc()
        self.duration.labels(self.server, route, method).observe(seconds)
        reason = AUTH_FAILURES.get(status)
        if reason is not None:
            self.auth_failures.labels(self.server, route, reason).inc()


def route_template(
    scope: Scope, routes: Sequence[BaseRoute] = (), request: Scope | None = None
) -> str:
    """The template of the route that served the request — the one FastAPI's router put in the
    scope, else the first of ``routes`` matching ``request`` (the scope as it arrived: plain
    Starlette routes and mounts leave no trace in it) — or ``unmatched``: never the path itself,
    which any client can vary without end."""
    path = getattr(scope.get("route"), "path", None)
    if isinstance(path, str) and path and request is not None:
        # Inside a mount the route's path is relative to it: prefix the mount's own (the root
        # path the router added on its way in).
        outer = str(request.get("root_path", ""))
        inner = str(scope.get("root_path", ""))
        if inner.startswith(outer):
            path = inner[len(outer) :] + path
    if not isinstance(path, str) or not path:
        # The router's scope may be a copy (a middleware that rewrites it, such as the
        # forwarded-headers guard, passes a new dict on): match the request as it came.
        path = _matched(routes, request or scope)
    if not isinstance(path, str) or not path:
        return UNMATCHED
    return path[:200]


def _routes_of(app: object) -> Sequence[BaseRoute]:
    """The routes of ``app``, or of the app a middleware wraps (its ``app``), however deep."""
    for _ in range(20):
        routes = getattr(app, "routes", None)
        if routes is not None:
            return list(routes)
        app = getattr(app, "app", None)
        if app is None:
            break
    return ()


def _matched(routes: Sequence[BaseRoute], scope: Scope, prefix: str = "") -> str | None:
    """The template of the first of ``routes`` matching ``scope``, through mounts."""
    for route in routes:
        path = getattr(route, "path", None)
        if not isinstance(path, str):
            continue
        match, child = route.matches(scope)
        if match is Match.NONE:
            continue
        inner: Sequence[BaseRoute] | None = getattr(route, "routes", None)
        if inner is None:
            return prefix + path
        found = _matched(inner, {**scope, **child}, prefix + path)
        if found:
            return found
    return None


class ObservedASGI:
    """Counts, times and logs every HTTP request to ``app`` (see the module docstring)."""

    def __init__(self, app: ASGIApp, metrics: HttpMetrics, *, access_log: bool = True) -> None:
        self.app = app
        self.metrics = metrics
        self.access_log = access_log
        self.routes = _routes_of(app)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        arrived = dict(scope)  # routers add to the scope as they go: match on it as it came
        status = 500  # what the server answers when the app raises before responding
        sent = 0

        async def observed_send(message: Message) -> None:
            nonlocal status, sent
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body":
                sent += len(message.get("body", b""))
            await send(message)

        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, observed_send)
        finally:
            self.metrics.in_flight.dec()
            seconds = time.perf_counter() - started
            method = str(scope.get("method", "")).upper()
            method = method if method in METHODS else "OTHER"
            route = route_template(scope, self.routes, arrived)
            self.metrics.observe(route, method, status, seconds)
            if self.access_log:
                client = scope.get("client")
                log.info(
                    "request",
                    server=self.metrics.server,
                    method=method,
                    route=route,
                    path=str(scope.get("path", ""))[:500],
                    status=status,
                    duration_ms=round(seconds * 1000, 2),
                    bytes=sent,
                    client=client[0] if client else None,
                )
