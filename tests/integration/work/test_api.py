"""The HTTP API (ADR-035 §12) over ASGI against PostgreSQL, and its OpenAPI document."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from producers.work.api import ApiServices, create_app
from spectral.settings import Settings
from tests.integration.work.support import (
    DOCUMENT,
    PROJECT,
    Harness,
    ScriptedSynthesizer,
    backlog,
    executor,
    executor_settings,
    harness,
    run_until_settled,
)

pytestmark = pytest.mark.integration


@asynccontextmanager
async def client(database_url: str) -> AsyncIterator[tuple[httpx.AsyncClient, Harness]]:
    async with harness(database_url) as h:
        app = create_app(ApiServices(h.commands, h.reader))
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://api") as http,
        ):
            yield http, h


async def test_commands_and_observation_over_http(database_url: str, settings: Settings) -> None:
    async with client(database_url) as (http, h):
        put = await http.put(f"/projects/{PROJECT}/documents/{DOCUMENT}", json=backlog("A", "B"))
        assert put.status_code == 201
        assert put.json()["version"] == 1
        body = {"project_id": PROJECT, "story_backlog_id": DOCUMENT, "epic_id": "E1"}
        first, second = await asyncio.gather(
            http.post("/commands/story-backlog/generate-epic", json=body),
            http.post("/commands/story-backlog/generate-epic", json=body),
        )
        assert sorted([first.status_code, second.status_code]) == [200, 202]
        assert first.json()["thread_id"] == second.json()["thread_id"]
        thread_id = first.json()["thread_id"]
        shown = (await http.get(f"/threads/{thread_id}")).json()
        assert shown["status"] == "open"
        assert shown["target_ref"] == {"document_id": DOCUMENT, "epic_id": "E1"}
        assert {"thread_id", "status", "target_ref", "created_at", "closed_at"} <= set(shown)
        everything = await http.post(
            "/commands/story-backlog/generate-all",
            json={"project_id": PROJECT, "story_backlog_id": DOCUMENT},
        )
        assert everything.status_code == 202
        parent_id = everything.json()["thread_id"]
        active = (await http.get(f"/projects/{PROJECT}/threads", params={"active": "true"})).json()
        assert len(active["threads"]) == 3  # the parent, E1 (adopted) and E2
        model = ScriptedSynthesizer()
        async with executor(executor_settings(settings), database_url, model) as handler:
            await run_until_settled(handler, h.admin)
        parent = (await http.get(f"/threads/{parent_id}")).json()
        assert parent["status"] == "complete"
        assert parent["closed_at"] is not None
        assert parent["child_summary"]["complete"] == 2
        assert (await http.get(f"/projects/{PROJECT}/threads?active=true")).json()["threads"] == []
        history = (await http.get(f"/threads/{parent_id}/history")).json()
        assert history["consistent"] is True
        assert {i["outcome"] for i in history["items"]} == {"applied"}
        assert [e["entry_type"] for e in history["entries"]].count("response") == 2
        document = (await http.get(f"/documents/{DOCUMENT}")).json()
        assert document["version"] == 3
        assert model.total == 2


async def test_errors_map_to_http_statuses(database_url: str) -> None:
    async with client(database_url) as (http, _):
        body = {"project_id": PROJECT, "story_backlog_id": DOCUMENT, "epic_id": "E1"}
        assert (
            await http.post("/commands/story-backlog/generate-epic", json=body)
        ).status_code == 404
        bad = {**body, "epic_id": "no/slashes"}
        assert (
            await http.post("/commands/story-backlog/generate-epic", json=bad)
        ).status_code == 422
        assert (await http.get("/threads/00000000-0000-0000-0000-000000000000")).status_code == 404
        await http.put(f"/projects/{PROJECT}/documents/{DOCUMENT}", json=backlog("A"))
        again = await http.put(f"/projects/{PROJECT}/documents/{DOCUMENT}", json=backlog("A"))
        assert again.status_code == 200
        other = await http.put(f"/projects/{PROJECT}/documents/{DOCUMENT}", json=backlog("B"))
        assert other.status_code == 409


async def test_the_openapi_document_describes_the_contract(database_url: str) -> None:
    async with client(database_url) as (http, _):
        spec = (await http.get("/openapi.json")).json()
    paths = spec["paths"]
    assert "post" in paths["/commands/story-backlog/generate-epic"]
    assert "post" in paths["/commands/story-backlog/generate-all"]
    assert "get" in paths["/threads/{thread_id}"]
    assert "get" in paths["/projects/{project_id}/threads"]
    thread = spec["components"]["schemas"]["ThreadOut"]["properties"]
    assert {"thread_id", "status", "target_ref", "created_at", "closed_at", "child_summary"} <= set(
        thread
    )
