"""The work endpoints of the HTTP API (ADR-035 §12) over ASGI against PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from producers.work.plugin import WORK_SUBMIT
from spectral.settings import Settings
from tests.integration.api.support import surface
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
async def client(settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, Harness]]:
    """The composed app, and a client whose token may submit work (and so read it)."""
    assert settings.database_url is not None
    database_url = settings.database_url.get_secret_value()
    async with (
        harness(database_url) as h,
        surface(settings, database_url, settings.kafka_bootstrap or "") as s,
    ):
        http = await s.client(WORK_SUBMIT, name="svc-planner")
        async with http:
            yield http, h


async def test_commands_and_observation_over_http(database_url: str, settings: Settings) -> None:
    async with client(settings) as (http, h):
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
        accepted = first if first.status_code == 202 else second
        assert accepted.headers["location"] == f"/threads/{thread_id}"
        shown = (await http.get(accepted.headers["location"])).json()
        assert shown["status"] == "open"
        assert shown["requested_by"] == "token:svc-planner"
        assert shown["requested_by_login"]  # the API's own database login, not declared
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
        path = f"/projects/{PROJECT}/documents/{DOCUMENT}"
        same = await http.put(path, json=document["content"])
        assert (same.status_code, same.json()["version"]) == (200, 3)
        for other in (backlog("A", "B"), backlog("A", "B", "C")):  # the first version, a new one
            refused = await http.put(path, json=other)
            assert refused.status_code == 409
            assert refused.json()["type"] == "/problems/document-immutable"
            assert refused.json()["current_version"] == 3
        assert (await http.get(f"/documents/{DOCUMENT}")).json() == document


async def test_errors_map_to_http_statuses(settings: Settings) -> None:
    async with client(settings) as (http, _):
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
        assert other.headers["content-type"] == "application/problem+json"
        assert other.json()["type"] == "/problems/document-immutable"
        assert other.json()["current_version"] == 1
        elsewhere = await http.put(f"/projects/p2/documents/{DOCUMENT}", json=backlog("A"))
        assert elsewhere.status_code == 409


async def test_project_threads_page_by_cursor(settings: Settings) -> None:
    async with client(settings) as (http, _):
        epics = [f"epic {n}" for n in range(7)]
        await http.put(f"/projects/{PROJECT}/documents/{DOCUMENT}", json=backlog(*epics))
        everything = await http.post(
            "/commands/story-backlog/generate-all",
            json={"project_id": PROJECT, "story_backlog_id": DOCUMENT},
        )
        assert everything.status_code == 202
        seen: list[str] = []
        cursor = None
        while True:
            params = {"limit": "3", **({"cursor": cursor} if cursor else {})}
            page = (await http.get(f"/projects/{PROJECT}/threads", params=params)).json()
            seen += [t["thread_id"] for t in page["threads"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert len(seen) == len(set(seen)) == 8  # the parent and seven children
        bad = await http.get(f"/projects/{PROJECT}/threads", params={"cursor": "x" * 40})
        assert bad.status_code == 400


async def test_the_openapi_document_describes_the_contract(settings: Settings) -> None:
    async with client(settings) as (http, _):
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
