"""The HTTP contract, endpoint by endpoint: the authorization matrix (every scope allowed or
refused on every operation, and every kind of bad token), hostile input (sizes, encodings, NUL,
lone surrogates, bad ids, random bytes) answered by documented problem documents, and an
OpenAPI document that names every operation, status and the security scheme."""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from consumers.rule_candidates.plugin import TRIAGE_READ, TRIAGE_WRITE
from producers.work.plugin import WORK_BUDGET, WORK_CANCEL, WORK_READ, WORK_SUBMIT
from spectral.api.resources import API_ROLE, Resources
from spectral.auth.scopes import OPS_READ, OPS_REDRIVE, installed_vocabulary
from spectral.auth.tokens import TOKEN_ADMIN_ROLE, TokenAdmin
from spectral.db.connect import connect
from spectral.declaration import Scope
from spectral.settings import Settings
from tests.integration.api.support import Surface, seed_clusters, surface
from tests.integration.work.support import DOCUMENT, PROJECT, backlog
from tests.support import database_login

pytestmark = pytest.mark.integration

PROBLEM = "application/problem+json"


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    scope: Scope
    body: Any = None
    headers: tuple[tuple[str, str], ...] = ()

    async def send(self, http: httpx.AsyncClient, **extra: Any) -> httpx.Response:
        return await http.request(
            self.method,
            self.path,
            json=self.body,
            headers=dict(self.headers) | extra.pop("headers", {}),
            **extra,
        )


@dataclass
class World:
    s: Surface
    cluster: uuid.UUID
    thread: str
    topic: str
    calls: list[Call]


@pytest.fixture
async def world(
    settings: Settings, database_url: str, kafka_bootstrap: str
) -> AsyncIterator[World]:
    """The app as deployed: through a login granted spectral_api (NOINHERIT: it holds no
    privilege until a pool assumes its role) and, for the replay dry run, the rule-candidates
    role; never the owner's."""
    (cluster,) = await seed_clusters(database_url, 1)
    async with (
        database_login(database_url, API_ROLE, "spectral_projector", inherit=False) as (
            _,
            login_url,
        ),
        surface(
            settings, database_url, kafka_bootstrap, login_url=login_url, max_body_bytes=64 * 1024
        ) as s,
    ):
        setup = await s.client(WORK_SUBMIT, name="setup")
        async with setup:
            put = await setup.put(f"/projects/{PROJECT}/documents/{DOCUMENT}", json=backlog("A"))
            assert put.status_code == 201
            cmd = {"project_id": PROJECT, "story_backlog_id": DOCUMENT, "epic_id": "E1"}
            thread = (await setup.post("/commands/story-backlog/generate-epic", json=cmd)).json()
        topic = f"{settings.topic_prefix}platform.failure_cluster.detected"
        calls = [
            Call("GET", f"/threads/{thread['thread_id']}", WORK_READ),
            Call("GET", f"/threads/{thread['thread_id']}/history", WORK_READ),
            Call("GET", f"/projects/{PROJECT}/threads", WORK_READ),
            Call("GET", f"/documents/{DOCUMENT}", WORK_READ),
            Call("POST", "/commands/story-backlog/generate-epic", WORK_SUBMIT, cmd),
            Call(
                "POST",
                "/commands/story-backlog/generate-all",
                WORK_SUBMIT,
                {"project_id": PROJECT, "story_backlog_id": DOCUMENT},
            ),
            Call(
                "PUT",
                f"/projects/{PROJECT}/documents/{DOCUMENT}",
                WORK_SUBMIT,
                backlog("A"),
            ),
            Call(
                "PUT",
                "/orgs/acme/budget",
                WORK_BUDGET,
                {"period": "day", "token_limit": 1000, "cost_limit": "2.5"},
            ),
            Call("GET", "/orgs/acme/budget", WORK_READ),
            Call("GET", "/budgets", WORK_READ),
            Call("DELETE", "/orgs/acme/budget", WORK_BUDGET),
            Call(
                "PUT",
                f"/budgets/thread/{thread['thread_id']}",
                WORK_BUDGET,
                {"period": "total", "token_limit": 5000},
            ),
            Call("GET", f"/budgets/thread/{thread['thread_id']}", WORK_READ),
            Call("GET", "/budgets?scope_kind=thread", WORK_READ),
            Call(
                "PUT",
                "/budgets/route/openai/gpt-4o",
                WORK_BUDGET,
                {"period": "day", "cost_limit": "3"},
            ),
            Call("DELETE", "/budgets/route/openai/gpt-4o", WORK_BUDGET),
            Call(
                "POST",
                f"/threads/{thread['thread_id']}/cancel",
                WORK_CANCEL,
                {"reason": "checked"},
            ),
            Call("GET", "/clusters", TRIAGE_READ),
            Call("GET", f"/clusters/{cluster}", TRIAGE_READ),
            Call(
                "PATCH",
                f"/clusters/{cluster}",
                TRIAGE_WRITE,
                {"notes": "checked"},
                (("If-Match", "*"),),
            ),
            Call("GET", "/ops/consumers", OPS_READ),
            Call("GET", "/ops/dead-letters", OPS_READ),
            Call("GET", f"/ops/dead-letters/{topic}", OPS_READ),
            Call("POST", f"/ops/dead-letters/{topic}/redrive", OPS_READ, {"dry_run": True}),
            Call("POST", f"/ops/dead-letters/{topic}/redrive", OPS_REDRIVE, {"dry_run": False}),
            Call(
                "POST",
                "/ops/consumers/rule-candidates/replay-dry-run",
                OPS_READ,
                {"from_beginning": True},
            ),
        ]
        yield World(s, cluster, thread["thread_id"], topic, calls)


async def test_every_scope_is_allowed_exactly_where_it_should_be(world: World) -> None:
    clients = {
        scope: await world.s.client(scope, name=f"only-{scope.name.replace(':', '-')}")
        for scope in installed_vocabulary().scopes
    }
    try:
        for call in world.calls:
            for scope, http in clients.items():
                response = await call.send(http)
                allowed = call.scope.name in installed_vocabulary().effective([scope.name])
                where = f"{call.method} {call.path} with {scope.name}"
                if allowed:
                    assert response.status_code < 400, f"{where}: {response.text}"
                else:
                    assert response.status_code == 403, f"{where}: {response.text}"
                    problem = response.json()
                    assert response.headers["content-type"] == PROBLEM
                    assert problem["type"] == "/problems/missing-scope"
                    assert problem["required_scope"] == call.scope.name
    finally:
        for http in clients.values():
            await http.aclose()


async def test_no_token_or_a_bad_one_is_401_on_every_operation(world: World) -> None:
    admin = await connect(world.s.database_url, role=TOKEN_ADMIN_ROLE)
    try:
        tokens = TokenAdmin(admin)
        revoked = await tokens.create("gone", list(installed_vocabulary().scopes))
        await tokens.revoke("gone")
        expired = await tokens.create(
            "old",
            list(installed_vocabulary().scopes),
            expires_at=datetime.now(UTC) - timedelta(seconds=1),
        )
    finally:
        await admin.close()
    live = await world.s.token("live", *installed_vocabulary().scopes)
    bad = {
        "none": None,
        "revoked": f"Bearer {revoked.token}",
        "expired": f"Bearer {expired.token}",
        "unknown": "Bearer spt_" + "A" * 43,
        "tampered": f"Bearer {live[:-1]}{'B' if live[-1] != 'B' else 'C'}",
        "not a token": "Bearer hello",
        "basic scheme": "Basic dXNlcjpwYXNz",
        "empty bearer": "Bearer ",
        "huge": "Bearer spt_" + "x" * 20_000,
    }
    http = world.s.http
    for call in world.calls:
        for label, header in bad.items():
            headers = {"Authorization": header} if header is not None else {}
            response = await call.send(http, headers=headers)
            assert response.status_code == 401, f"{call.method} {call.path} {label}"
            assert response.headers["content-type"] == PROBLEM
            assert response.headers["www-authenticate"].startswith("Bearer")
            assert response.json()["type"] == "/problems/unauthenticated"


async def test_hostile_input_gets_documented_problems_never_a_500(world: World) -> None:
    http = await world.s.client(*installed_vocabulary().scopes, name="everything")
    marker = "ECHO-" + uuid.uuid4().hex
    rng = random.Random(20261124)
    async with http:
        for call in world.calls:
            cases: list[tuple[str, dict[str, Any], set[int]]] = [
                ("path NUL", {"path": call.path + "%00"}, {400}),
                ("path not UTF-8", {"path": call.path.rstrip("/") + "%ff%fe"}, {400, 404}),
                ("query NUL", {"params": {"x": "a\x00b"}}, {400}),
                ("query not UTF-8", {"raw_query": b"x=%ff"}, {400}),
            ]
            if call.body is not None:
                cases += [
                    ("lone surrogate", {"content": b'{"notes": "\\ud800"}'}, {400}),
                    ("NUL in a string", {"content": b'{"notes": "a\\u0000b"}'}, {422}),
                    ("NUL in a key", {"content": b'{"a\\u0000": 1}'}, {422}),
                    ("not JSON", {"content": b"{nope"}, {400}),
                    ("not UTF-8", {"content": b'{"notes": "\xff"}'}, {400}),
                    ("deep nesting", {"content": b"[" * 5000 + b"]" * 5000}, {400}),
                    ("too large", {"content": b'{"notes": "' + b"x" * 70_000 + b'"}'}, {413}),
                    (
                        "wrong types echo",
                        {
                            "json": {
                                "project_id": marker,
                                "status": marker,
                                "reason": [marker],
                                "epic_id": {marker: marker},
                                "from_offset": 7,
                                "dry_run": marker,
                            }
                        },
                        {400, 404, 409, 422},
                    ),
                ]
                for n in range(8):
                    blob = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
                    cases.append((f"random bytes {n}", {"content": blob}, {400, 422}))
            for label, variant, expected in cases:
                response = await _send_variant(http, call, variant)
                where = f"{call.method} {call.path}: {label}"
                assert response.status_code in expected, (
                    f"{where}: {response.status_code} {response.text[:300]}"
                )
                assert response.headers["content-type"] == PROBLEM, where
                assert marker not in response.text, f"{where} echoes the input"
                assert "asyncpg" not in response.text
                assert "Traceback" not in response.text
        # Bad ids in paths: a clear 422 naming the parameter, never a 500.
        for path in (
            "/threads/not-a-uuid",
            "/clusters/123",
            f"/projects/{'p' * 300}/threads",
            "/projects/has%20space/threads",
            "/projects/%E2%80%AE/threads",
            "/documents/..%2F..%2Fetc",
        ):
            response = await http.get(path)
            assert response.status_code in (404, 422), path
            assert response.headers["content-type"] == PROBLEM, path
        chunked = await http.put(
            f"/projects/{PROJECT}/documents/{DOCUMENT}",
            content=_chunks(200 * 1024),
            headers={"Content-Type": "application/json"},
        )
        assert chunked.status_code == 413
        assert chunked.json()["max_body_bytes"] == 64 * 1024


async def _chunks(total: int) -> AsyncIterator[bytes]:
    yield b'{"title": "'
    for _ in range(total // 4096):
        yield b"x" * 4096
    yield b'"}'


async def _send_variant(
    http: httpx.AsyncClient, call: Call, variant: dict[str, Any]
) -> httpx.Response:
    path = variant.get("path", call.path)
    headers = dict(call.headers)
    if "content" in variant:
        headers["Content-Type"] = "application/json"
        return await http.request(call.method, path, content=variant["content"], headers=headers)
    if "raw_query" in variant:
        url = httpx.URL(path, query=variant["raw_query"])
        return await http.request(call.method, url, json=call.body, headers=headers)
    return await http.request(
        call.method,
        path,
        json=variant.get("json", call.body),
        params=variant.get("params"),
        headers=headers,
    )


async def test_the_openapi_document_names_every_operation_status_and_scheme(world: World) -> None:
    http = world.s.http
    spec = (await http.get("/openapi.json")).json()
    assert spec["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert "Problem" in spec["components"]["schemas"]
    ids = []
    for path, operations in spec["paths"].items():
        for method, op in operations.items():
            ids.append(op["operationId"])
            assert re.fullmatch(r"[a-z][a-z_]+", op["operationId"]), op["operationId"]
            assert op.get("security") == [{"bearer": []}], f"{method} {path}"
            statuses = set(op["responses"])
            assert {"400", "401", "403", "413", "422", "500", "503"} <= statuses, f"{method} {path}"
            for status, answer in op["responses"].items():
                if int(status) >= 400:
                    assert PROBLEM in answer["content"], f"{method} {path} {status}"
    assert len(ids) == len(set(ids))
    assert {
        "list_failure_clusters",
        "get_cluster_detail",
        "triage_cluster",
        "generate_epic",
        "list_project_threads",
        "redrive_dead_letters",
        "cancel_work_thread",
        "list_budgets",
        "get_budget",
        "put_budget",
        "delete_budget",
        "get_scope_budget",
        "put_scope_budget",
        "delete_scope_budget",
    } <= set(ids)
    cancel = spec["paths"]["/threads/{thread_id}/cancel"]["post"]["responses"]
    assert {"200", "202", "404"} <= set(cancel)
    schemas = spec["components"]["schemas"]
    assert {"parked", "canceled"} <= set(schemas["ItemStatus"]["enum"])
    assert "canceled" in schemas["ThreadStatus"]["enum"]
    patch = spec["paths"]["/clusters/{cluster_id}"]["patch"]["responses"]
    assert {"409", "412", "428"} <= set(patch)
    generate = spec["paths"]["/commands/story-backlog/generate-epic"]["post"]["responses"]
    assert "Location" in generate["202"]["headers"]
    # The docs pages load nothing from another host, and what they load is served.
    for page in ("/docs", "/redoc"):
        html = (await http.get(page)).text
        assets = re.findall(r'(?:src|href)="([^"]+)"', html) + re.findall(
            r"(?:url|href|src):\s*['\"]([^'\"]+)['\"]", html
        )
        assert assets, page
        for asset in assets:
            assert not asset.startswith(("http:", "https:", "//")), f"{page} loads {asset}"
            if asset.startswith("/_assets/"):
                assert (await http.get(asset)).status_code == 200, asset


async def test_tokens_are_stored_only_as_hashes(world: World) -> None:
    token = await world.s.token("hashed", TRIAGE_READ)
    owner = await asyncpg.connect(world.s.database_url)
    try:
        rows = await owner.fetch("SELECT * FROM core.api_tokens")
        dump = repr([dict(r) for r in rows])
        assert token not in dump
        assert token[4:] not in dump
        # Not even the authenticator role can list the hashes' names by scanning secrets:
        # it has no privilege on display_prefix or created_by.
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await owner.execute(
                "SET ROLE spectral_authenticator; SELECT display_prefix FROM core.api_tokens"
            )
    finally:
        await owner.close()


async def test_the_api_login_is_least_privilege_and_the_owner_is_flagged(
    settings: Settings, database_url: str, kafka_bootstrap: str
) -> None:
    """spectral_api's login can do nothing on its own and cannot become the token admin or the
    maintainer; the owner's login is flagged (the API warns at start)."""
    async with database_login(database_url, API_ROLE, inherit=False) as (_, login_url):
        conn = await asyncpg.connect(login_url)
        try:
            for statement in (
                "SELECT count(*) FROM core.api_tokens",
                "SELECT count(*) FROM work.threads",
                "SET ROLE spectral_token_admin",
                "SET ROLE spectral_maintainer",
                "CREATE TABLE core.intruder (x int)",
            ):
                with pytest.raises(asyncpg.PostgresError):
                    await conn.execute(statement)
        finally:
            await conn.close()
        assert await Resources(settings, login_url, kafka_bootstrap).overprivileged() is None
    flagged = await Resources(settings, database_url, kafka_bootstrap).overprivileged()
    assert flagged is not None
    assert "owns the schemas" in flagged or "superuser" in flagged
