"""Every console page under every scope, and hostile input to every page, over ASGI against the
real database and broker (the browser tests walk the same pages as a person would)."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest

from consumers.rule_candidates.plugin import TRIAGE_READ, TRIAGE_WRITE
from producers.work.plugin import WORK_BUDGET, WORK_CANCEL, WORK_READ, WORK_SUBMIT
from spectral.auth.scopes import OPS_READ, OPS_REDRIVE, installed_vocabulary
from spectral.declaration import Scope
from spectral.settings import Settings
from tests.integration.api.support import Surface, seed_clusters, surface
from tests.integration.work.support import DOCUMENT, PROJECT, backlog

pytestmark = pytest.mark.integration


def csrf_of(token: str) -> str:
    return hmac.new(token.encode(), b"spectral-console-csrf", hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Page:
    method: str
    path: str
    scope: Scope
    form: tuple[tuple[str, str], ...] = ()


@dataclass
class Console:
    s: Surface
    pages: list[Page]
    topic: str


@pytest.fixture
async def console(
    settings: Settings, database_url: str, kafka_bootstrap: str
) -> AsyncIterator[Console]:
    (cluster,) = await seed_clusters(database_url, 1)
    topic = f"{settings.topic_prefix}platform.failure_cluster.detected"
    async with surface(settings, database_url, kafka_bootstrap) as s:
        setup = await s.client(WORK_SUBMIT, name="setup")
        async with setup:
            put = await setup.put(f"/projects/{PROJECT}/documents/{DOCUMENT}", json=backlog("A"))
            assert put.status_code == 201
            cmd = {"project_id": PROJECT, "story_backlog_id": DOCUMENT, "epic_id": "E1"}
            thread = (await setup.post("/commands/story-backlog/generate-epic", json=cmd)).json()
        pages = [
            Page("GET", "/console/clusters", TRIAGE_READ),
            Page("GET", f"/console/clusters/{cluster}", TRIAGE_READ),
            Page(
                "POST",
                f"/console/clusters/{cluster}",
                TRIAGE_WRITE,
                (("version", "0"), ("status", "pending"), ("notes", "n")),
            ),
            Page("GET", "/console/consumers", OPS_READ),
            Page("POST", "/console/dead-letters/redrive", OPS_READ, (("topic", topic),)),
            Page(
                "POST",
                "/console/dead-letters/redrive",
                OPS_REDRIVE,
                (("topic", topic), ("confirm", "1")),
            ),
            Page("GET", "/console/threads?project=p1", WORK_READ),
            Page("GET", f"/console/threads/{thread['thread_id']}", WORK_READ),
            Page(
                "POST",
                f"/console/threads/{thread['thread_id']}/cancel",
                WORK_CANCEL,
                (("reason", "not needed"),),
            ),
            Page("GET", "/console/budgets", WORK_READ),
            Page(
                "POST",
                "/console/budgets",
                WORK_BUDGET,
                (("org_id", "acme"), ("period", "day"), ("tokens", "1000")),
            ),
        ]
        yield Console(s, pages, topic)


async def _send(
    http: httpx.AsyncClient, page: Page, token: str, *, form: dict[str, str] | None = None
) -> httpx.Response:
    http.cookies.set("spectral_session", token, path="/console")
    if page.method == "GET":
        return await http.get(page.path)
    data = {"csrf": csrf_of(token), **dict(page.form), **(form or {})}
    return await http.post(page.path, data=data)


async def test_every_page_under_every_scope(console: Console) -> None:
    http = console.s.http
    for scope in installed_vocabulary().scopes:
        token = await console.s.token(f"page-{scope.name.replace(':', '-')}", scope)
        for page in console.pages:
            response = await _send(http, page, token)
            where = f"{page.method} {page.path} with {scope.name}"
            if page.scope.name in installed_vocabulary().effective([scope.name]):
                assert response.status_code in (200, 303), f"{where}: {response.text[:300]}"
            else:
                assert response.status_code == 403, where
                assert page.scope.name in response.text, where
            if response.status_code != 303:
                assert response.headers["content-type"].startswith("text/html"), where
                # Never framed (clickjacking), no script, never cached (triage state, threads).
                assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
                assert "script-src" not in response.headers["content-security-policy"]
                assert response.headers["x-frame-options"] == "DENY", where
                assert response.headers["cache-control"] == "no-store", where
    # No session (or a revoked or unknown one): back to the login page, never the page.
    http.cookies.clear()
    for page in console.pages:
        response = await (
            http.get(page.path) if page.method == "GET" else http.post(page.path, data={})
        )
        assert response.status_code == 303, page.path
        assert response.headers["location"].startswith("/console/login?next=")


async def test_hostile_input_to_every_page(console: Console) -> None:
    token = await console.s.token("hostile", *installed_vocabulary().scopes)
    http = console.s.http
    marker = "<script>alert('x')</script>"
    for page in console.pages:
        for label, form, expected in (
            ("no csrf", {"csrf": ""}, {403}),
            ("forged csrf", {"csrf": "0" * 64}, {403}),
            ("NUL", {"notes": "a\x00b", "topic": "x\x00"}, {400}),
            ("huge", {"notes": "x" * 2_000_000}, {413}),
            ("markup", {"notes": marker, "topic": marker, "reason": marker}, {200, 303, 404}),
            ("bad version", {"version": "-1"}, {200, 303, 422}),
        ):
            if page.method == "GET":
                continue
            response = await _send(http, page, token, form=form)
            where = f"{page.method} {page.path}: {label}"
            assert response.status_code in expected, f"{where}: {response.status_code}"
            assert marker not in response.text, f"{where}: markup rendered unescaped"
        for query in ("?status=%00", "?status=bogus", "?cursor=abc", "?sort=%ff"):
            if page.method != "GET" or not page.path.startswith("/console/clusters"):
                continue
            response = await _send(http, Page("GET", page.path + query, page.scope), token)
            assert response.status_code in (200, 400, 422), f"{page.path}{query}"
    for path in ("/console/clusters/not-a-uuid", "/console/threads/xyz", "/console/nowhere"):
        response = await _send(http, Page("GET", path, TRIAGE_READ), token)
        assert response.status_code in (404, 422), path
    # What an operator typed is shown escaped, never as markup.
    page = console.pages[2]
    saved = await _send(http, page, token, form={"notes": marker, "version": "1"})
    assert saved.status_code == 303
    shown = await http.get(page.path)
    assert marker not in shown.text
    assert "&lt;script&gt;" in shown.text


async def test_another_site_cannot_log_a_browser_in(console: Console) -> None:
    """Login CSRF: a page elsewhere posting its own token to the login form would make the
    victim's later triage appear under the attacker's token name."""
    token = await console.s.token("attacker", TRIAGE_WRITE)
    http = console.s.http
    http.cookies.clear()
    forged = await http.post(
        "/console/login",
        data={"token": token},
        headers={"Origin": "https://evil.example"},
    )
    assert forged.status_code == 403
    assert "set-cookie" not in forged.headers
    for origin in ("http://api", None):  # the console's own form; a client sending no Origin
        headers = {"Origin": origin} if origin else {}
        own = await http.post("/console/login", data={"token": token}, headers=headers)
        assert own.status_code == 303, own.text
        assert "spectral_session=" in own.headers["set-cookie"]


async def test_the_thread_page_offers_cancel_only_to_work_cancel_and_shows_the_outcome(
    console: Console,
) -> None:
    http = console.s.http
    thread_page = next(p for p in console.pages if p.path.startswith("/console/threads/"))
    reader = await console.s.token("reader", WORK_READ)
    shown = await _send(http, thread_page, reader)
    assert 'id="cancel-thread"' not in shown.text
    canceler = await console.s.token("canceler", WORK_CANCEL)
    shown = await _send(http, thread_page, canceler)
    assert 'id="cancel-thread"' in shown.text
    cancel = next(p for p in console.pages if p.path.endswith("/cancel"))
    done = await _send(http, cancel, canceler, form={"reason": "<b>stop</b>"})
    assert done.status_code == 303
    shown = await _send(http, thread_page, canceler)
    assert 'id="cancel-notice"' in shown.text
    assert "&lt;b&gt;stop&lt;/b&gt;" in shown.text
    assert 'class="badge s-canceled" id="thread-status">canceled' in shown.text
    assert 'id="cancel-thread"' not in shown.text  # nothing left to cancel
    budgeter = await console.s.token("budgeter", WORK_BUDGET)
    budget_form = next(p for p in console.pages if p.path == "/console/budgets" and p.form)
    assert (await _send(http, budget_form, budgeter)).status_code == 303
    listing = await _send(http, Page("GET", "/console/budgets", WORK_READ), reader)
    assert 'id="budget-acme"' in listing.text
    assert 'id="set-budget"' not in listing.text  # reading is not setting
    nested = Page(
        "POST",
        "/console/budgets",
        WORK_BUDGET,
        (("scope_kind", "project"), ("org_id", "p1"), ("period", "week"), ("tokens", "700")),
    )
    assert (await _send(http, nested, budgeter)).status_code == 303
    listing = await _send(http, Page("GET", "/console/budgets", WORK_READ), reader)
    assert 'id="budget-project-p1"' in listing.text
    assert "project p1" in listing.text
