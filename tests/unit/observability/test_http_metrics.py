"""The HTTP middleware's labels stay in fixed sets whatever a client sends (paths, methods), a
request the app fails on is counted as the 500 the server answers, and credential refusals are
counted apart."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, HTTPException
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from spectral.observability.http import METHODS, UNMATCHED, HttpMetrics, ObservedASGI


def _app() -> FastAPI:
    app = FastAPI()

    @app.get("/items/{item_id}")
    async def item(item_id: str) -> dict[str, str]:
        if item_id == "locked":
            raise HTTPException(403, "no scope")
        if item_id == "anonymous":
            raise HTTPException(401, "no token")
        if item_id == "boom":
            raise RuntimeError("a bug")
        return {"id": item_id}

    async def plain(_: Any) -> PlainTextResponse:
        return PlainTextResponse("plain")

    app.router.routes.append(Route("/plain/{name}", plain))
    app.router.routes.append(Mount("/static", routes=[Route("/{file}", plain)]))
    return app


TEMPLATES = {
    "/items/{item_id}", "/plain/{name}", "/static", "/static/{file}", "/openapi.json", "/docs",
    "/docs/oauth2-redirect", "/redoc", UNMATCHED,
}  # fmt: skip


def _samples(registry: CollectorRegistry, name: str) -> list[dict[str, str]]:
    return [
        dict(sample.labels, value=str(sample.value))
        for metric in registry.collect()
        for sample in metric.samples
        if sample.name == name
    ]


async def _raw(app: Any, method: str, path: str) -> int:
    """One request straight through ASGI (no client library to refuse a hostile path)."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path, "raw_path": path.encode("utf-8", "surrogatepass"),
        "root_path": "", "query_string": b"", "headers": [], "client": ("10.0.0.1", 1),
        "server": ("t", 80),
    }  # fmt: skip
    status: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    with contextlib.suppress(Exception):  # the app's own failure: the server answers 500
        await app(scope, receive, send)
    return status[0] if status else 500


async def _get(app: Any, method: str, path: str) -> int:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return (await client.request(method, path)).status_code


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["GET", "POST", "DELETE", "BREW", "get", "X" * 40, "PROPFIND"]),
            st.text(max_size=60).map(lambda p: "/" + p),
        ),
        min_size=1,
        max_size=15,
    )
)
def test_labels_stay_in_fixed_sets_whatever_is_asked(requests: list[tuple[str, str]]) -> None:
    registry = CollectorRegistry()
    app = ObservedASGI(_app(), HttpMetrics(registry, "api"), access_log=False)

    async def ask() -> None:
        for method, path in requests:
            await _raw(app, method, path)

    asyncio.run(ask())
    counted = _samples(registry, "spectral_http_requests_total")
    assert sum(float(s["value"]) for s in counted) == len(requests)
    for sample in counted:
        assert sample["route"] in TEMPLATES
        assert sample["method"] in METHODS | {"OTHER"}
        assert sample["status_class"] in {"1xx", "2xx", "3xx", "4xx", "5xx"}


async def test_routes_statuses_and_refusals_are_counted() -> None:
    registry = CollectorRegistry()
    app = ObservedASGI(_app(), HttpMetrics(registry, "api"), access_log=False)
    assert await _get(app, "GET", "/items/1") == 200
    assert await _get(app, "GET", "/items/2") == 200
    assert await _get(app, "GET", "/items/locked") == 403
    assert await _get(app, "GET", "/items/anonymous") == 401
    assert await _get(app, "GET", "/items/boom") == 500
    assert await _get(app, "GET", "/plain/x") == 200
    assert await _get(app, "GET", "/static/a.css") == 200
    assert await _get(app, "GET", "/elsewhere") == 404
    counted = {
        (s["route"], s["status_class"]): float(s["value"])
        for s in _samples(registry, "spectral_http_requests_total")
    }
    assert counted == {
        ("/items/{item_id}", "2xx"): 2,
        ("/items/{item_id}", "4xx"): 2,
        ("/items/{item_id}", "5xx"): 1,
        ("/plain/{name}", "2xx"): 1,
        ("/static/{file}", "2xx"): 1,
        (UNMATCHED, "4xx"): 1,
    }
    refused = {
        s["reason"]: float(s["value"])
        for s in _samples(registry, "spectral_http_auth_failures_total")
    }
    assert refused == {"authorization": 1, "authentication": 1}
    durations = _samples(registry, "spectral_http_request_duration_seconds_count")
    assert sum(float(s["value"]) for s in durations) == 8
    (in_flight,) = _samples(registry, "spectral_http_requests_in_flight")
    assert float(in_flight["value"]) == 0


async def test_the_access_log_names_the_request_never_its_secrets() -> None:
    import structlog  # noqa: PLC0415

    app = ObservedASGI(_app(), HttpMetrics(CollectorRegistry(), "api"))
    transport = httpx.ASGITransport(app=app)
    with structlog.testing.capture_logs() as logs:
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            await client.get(
                "/items/1?token=spt_secret",
                headers={"Authorization": "Bearer spt_secret", "Cookie": "s=spt_secret"},
            )
    (line,) = [entry for entry in logs if entry["event"] == "request"]
    assert line["route"] == "/items/{item_id}"
    assert line["path"] == "/items/1"
    assert line["status"] == 200
    assert "spt_secret" not in repr(line)


@pytest.mark.parametrize("scope_type", ["lifespan", "websocket"])
async def test_other_scopes_pass_untouched(scope_type: str) -> None:
    seen: list[str] = []

    async def inner(scope: Any, _receive: Any, _send: Any) -> None:
        seen.append(scope["type"])

    registry = CollectorRegistry()
    await ObservedASGI(inner, HttpMetrics(registry, "api"))({"type": scope_type}, None, None)  # type: ignore[arg-type]
    assert seen == [scope_type]
    assert _samples(registry, "spectral_http_requests_total") == []
