"""The web console in a real browser: Debian's Chromium driven by Playwright, against the app
served by uvicorn on a real socket over the real database and broker.

An operator logs in with a token, triages a cluster and sees the change and its audit trail, a
second tab's stale edit is refused, a reader token cannot triage, the consumers page shows lag
and dead letters by reason, a redrive dry run lists what would go and the confirmation redrives
it, and a thread shows its child summary and ledger timeline. With SPECTRAL_SCREENSHOTS=DIR the
main pages are saved there (the docs' pictures, docs/screenshots, come from this test).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from playwright.async_api import Browser, BrowserContext, Page, async_playwright

from consumers.rule_candidates.plugin import TRIAGE_READ, TRIAGE_WRITE
from contracts import FAILURE_CLUSTER_DETECTED
from producers.work.plugin import WORK_BUDGET, WORK_READ
from spectral.auth.scopes import OPS_READ, OPS_REDRIVE
from spectral.cli.api import compose_app, deployment_topics
from spectral.devstack import Endpoints
from spectral.devstack.ports import free_port
from spectral.kafka.topics import dlq_topic, topic_for
from spectral.settings import Settings
from tests.integration.api.support import mint
from tests.integration.replay.support import rule_candidates, run_live
from tests.integration.work.support import (
    DOCUMENT,
    PROJECT,
    ScriptedSynthesizer,
    backlog,
    executor,
    executor_settings,
    harness,
    run_until_settled,
)
from tests.kafka_support import cluster_event, create_topics, publish, publish_envelopes
from tests.support import unique_name

pytestmark = pytest.mark.integration

ORG = "acme"

CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    found = os.environ.get("SPECTRAL_CHROMIUM") or shutil.which("chromium")
    if not found:
        pytest.fail(
            "Debian's chromium is missing: `make test` installs it (apt-get install chromium)"
        )
    return found


@dataclass
class Site:
    url: str
    operator: str
    reader: str
    clusters: list[str]
    parent_thread: str


@pytest.fixture
async def site(settings: Settings, database_url: str, kafka_bootstrap: str) -> AsyncIterator[Site]:
    group = unique_name("rc-")
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await create_topics(kafka_bootstrap, [topic, dlq_topic(topic)], partitions=2)
    events = [cluster_event(severity=s) for s in ("high", "medium", "low", "high")]
    await publish_envelopes(kafka_bootstrap, topic, events)
    await publish(kafka_bootstrap, topic, [(b"k1", b"{not json"), (b"k2", b"[1, 2]")])
    await run_live(settings, rule_candidates(settings)(""), group=group, idle=2.0)
    async with harness(database_url) as h:
        await h.commands.put_document(PROJECT, DOCUMENT, backlog("Checkout", "Search"))
        from producers.work.commands import GenerateAll  # noqa: PLC0415

        parent = await h.commands.generate_all(
            GenerateAll(PROJECT, DOCUMENT, requested_by="token:planner", org_id=ORG)
        )
        async with executor(executor_settings(settings), database_url, ScriptedSynthesizer()) as w:
            await run_until_settled(w, h.admin)
    app = compose_app(
        settings,
        Endpoints(kafka_bootstrap, database_url),
        await deployment_topics(settings, database_url),
        groups={"rule-candidates": group},
    )
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.05)
    try:
        yield Site(
            url=f"http://127.0.0.1:{port}",
            operator=await mint(
                database_url, "ops-alice", TRIAGE_WRITE, OPS_REDRIVE, WORK_READ, WORK_BUDGET
            ),
            reader=await mint(database_url, "viewer-bob", TRIAGE_READ, OPS_READ),
            clusters=[str(e.payload.cluster_id) for e in events],
            parent_thread=str(parent.thread_id),
        )
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, timeout=30)


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=chromium_path(), headless=True, args=CHROMIUM_FLAGS
        )
        try:
            yield launched
        finally:
            await launched.close()


async def fresh_context(browser: Browser) -> BrowserContext:
    """A context of its own (a fresh profile: no cookies, no cache)."""
    return await browser.new_context(viewport={"width": 1360, "height": 900})


async def log_in(page: Page, site: Site, token: str) -> None:
    await page.goto(f"{site.url}/console/clusters")
    assert "/console/login" in page.url  # no session: the login page
    await page.fill("#token", token)
    await page.click("button[type=submit]")
    await page.wait_for_url("**/console/clusters")


async def shot(page: Page, name: str) -> None:
    folder = os.environ.get("SPECTRAL_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


async def test_an_operator_works_through_the_console(  # noqa: PLR0915 - one operator's path
    site: Site, browser: Browser
) -> None:
    context = await fresh_context(browser)
    page = await context.new_page()
    # A wrong token is refused on the login page.
    await page.goto(f"{site.url}/console/login")
    await page.fill("#token", "spt_" + "Z" * 43)
    await page.click("button[type=submit]")
    assert "unknown, revoked or expired" in await page.inner_text(".error")

    await log_in(page, site, site.operator)
    rows = page.locator("#inbox tbody tr")
    assert await rows.count() == 4
    assert await page.locator("#inbox .sev-high").count() == 2
    cookies = await context.cookies()
    session = next(c for c in cookies if c["name"] == "spectral_session")
    assert session["httpOnly"]
    assert session["sameSite"] == "Strict"
    await shot(page, "inbox")

    # Triage a cluster and see the change and the audit trail.
    cluster = site.clusters[0]
    await page.goto(f"{site.url}/console/clusters/{cluster}")
    assert await page.inner_text("#current-status") == "pending"
    await page.select_option("#t-status", "in_review")
    await page.fill("#t-notes", "Looks like the scanner, not the rule.")
    await page.click("#triage-form button[type=submit]")
    await page.wait_for_url(f"**/console/clusters/{cluster}?saved=1")
    assert await page.inner_text("#current-status") == "in_review"
    assert await page.inner_text("#current-notes") == "Looks like the scanner, not the rule."
    assert await page.locator("#audit .actor").first.inner_text() == "token:ops-alice"
    await shot(page, "cluster")
    await page.goto(f"{site.url}/console/clusters?status=in_review")
    assert await page.locator("#inbox tbody tr").count() == 1
    assert await page.locator("#inbox td.status").first.inner_text() == "in_review"

    # A stale edit: two tabs open the same cluster; the second save is refused.
    first, second = await context.new_page(), await context.new_page()
    for tab in (first, second):
        await tab.goto(f"{site.url}/console/clusters/{cluster}")
    await first.select_option("#t-status", "resolved")
    await first.click("#triage-form button[type=submit]")
    await first.wait_for_url("**saved=1")
    await second.select_option("#t-status", "dismissed")
    await second.fill("#t-notes", "my stale opinion")
    async with second.expect_response(lambda r: r.request.method == "POST") as posted:
        await second.click("#triage-form button[type=submit]")
    assert (await posted.value).status == 409
    assert "your change was NOT applied" in await second.inner_text("#form-error")
    assert await second.inner_text("#current-status") == "resolved"
    assert await second.input_value("#t-notes") == "my stale opinion"  # the input is kept
    await shot(second, "stale-edit")

    # The consumers page: lag per partition and dead letters by reason; a redrive dry run, then
    # the confirmed redrive.
    await page.goto(f"{site.url}/console/consumers")
    deployment = page.locator('section.consumer[data-deployment="rule-candidates"]')
    assert await deployment.locator("tbody tr").count() == 2
    letters = page.locator("#dead-letters tbody tr").first
    assert "not_json" in await letters.inner_text()
    await shot(page, "consumers")
    await letters.locator("form.dry-run button").click()
    await page.wait_for_selector("#redrive-summary")
    assert "Would redrive 2 of 2" in await page.inner_text("#redrive-summary")
    await shot(page, "redrive-dry-run")
    await page.click("#confirm-redrive button")
    await page.wait_for_selector("#redrive-summary")
    assert "Redrove 2 of 2" in await page.inner_text("#redrive-summary")
    await page.goto(f"{site.url}/console/consumers")
    after = await page.locator("#dead-letters tbody tr").first.inner_text()
    assert after.count("(1 redriven)") == 2, after
    assert await page.locator("#dead-letters form.dry-run").count() == 0  # nothing left

    # The projects lead to their threads.
    await page.goto(f"{site.url}/console/threads")
    project = page.locator(f'#projects tr[data-project="{PROJECT}"]')
    assert await project.locator("td.num").first.inner_text() == "1"  # one top-level thread
    await shot(page, "projects")
    await project.locator("a").first.click()
    await page.wait_for_selector("#threads")
    assert await page.locator("#threads tbody tr").count() == 3
    # A thread: child summary and the ledger timeline of its items.
    await page.goto(f"{site.url}/console/threads/{site.parent_thread}")
    assert await page.inner_text("#thread-status") == "complete"
    assert "complete 2" in await page.inner_text("#child-summary")
    await shot(page, "thread")
    child = page.locator("#child-summary a").first
    await child.click()
    await page.wait_for_selector("ol.timeline")
    timeline = await page.inner_text("ol.timeline")
    for entry in ("prompt", "response", "parse_report", "mutation_report"):
        assert entry in timeline
    assert await page.locator("#child-summary").count() == 0  # a child has no children
    await shot(page, "item-ledger")

    # Budgets: the org's spend over the period, drawn from its spend record, against the limit.
    await page.goto(f"{site.url}/console/budgets")
    await page.fill("#b-org", ORG)
    await page.fill("#b-tokens", "5000")
    await page.click("#set-budget button[type=submit]")
    await page.wait_for_url("**/console/budgets")
    chart = page.locator(f"#spend-{ORG} svg.chart")
    assert await chart.locator(".chart-limit").count() == 1
    described = await chart.locator("desc").text_content() or ""
    assert "samples of tokens" in described, described
    assert not described.endswith("highest 0."), described  # the calls' tokens are in it
    await shot(page, "budgets")
    await context.close()


async def test_a_reader_cannot_triage_or_redrive(site: Site, browser: Browser) -> None:
    context = await fresh_context(browser)
    page = await context.new_page()
    await log_in(page, site, site.reader)
    await page.goto(f"{site.url}/console/clusters/{site.clusters[1]}")
    assert await page.locator("#triage-form").count() == 0
    assert "needs triage:write" in await page.inner_text("main")
    # Posting the form anyway (a crafted request with the session cookie) is refused.
    response = await page.request.post(
        f"{site.url}/console/clusters/{site.clusters[1]}",
        form={"version": "0", "status": "dismissed", "csrf": "x"},
    )
    assert response.status == 403
    # The threads page needs work:read, which this token lacks: a clear 403 page.
    threads = await page.goto(f"{site.url}/console/threads")
    assert threads is not None
    assert threads.status == 403
    assert "work:read" in await page.inner_text("main")
    # A dry run is allowed; the confirmation is not offered.
    await page.goto(f"{site.url}/console/consumers")
    await page.locator("#dead-letters form.dry-run button").first.click()
    await page.wait_for_selector("#redrive-summary")
    assert await page.locator("#confirm-redrive").count() == 0
    assert "needs a token with ops:redrive" in await page.inner_text("main")
    # Log out: the session is gone.
    await page.click("header .who button")
    await page.wait_for_url("**/console/login")
    await page.goto(f"{site.url}/console/clusters")
    assert "/console/login" in page.url
    await context.close()


async def test_forged_and_cross_site_posts_are_refused(site: Site, browser: Browser) -> None:
    context = await fresh_context(browser)
    page = await context.new_page()
    await log_in(page, site, site.operator)
    cluster = site.clusters[2]
    missing_csrf = await page.request.post(
        f"{site.url}/console/clusters/{cluster}", form={"version": "0", "status": "dismissed"}
    )
    assert missing_csrf.status == 403
    hostile = await page.request.post(
        f"{site.url}/console/clusters/{cluster}",
        form={"version": "0", "status": "dismissed", "csrf": "0" * 64, "notes": "x\x00y"},
    )
    assert hostile.status in (400, 403)
    # An open redirect after login is not followed outside the console.
    await page.goto(f"{site.url}/console/login?next=https://example.invalid/")
    await page.fill("#token", site.operator)
    await page.click("button[type=submit]")
    await page.wait_for_url("**/console/clusters")
    detail: Any = await page.goto(f"{site.url}/console/clusters/{cluster}")
    assert detail.status == 200
    assert await page.inner_text("#current-status") == "pending"
    await context.close()


AXE = Path(__file__).resolve().parents[2] / "axe" / "node_modules" / "axe-core" / "axe.min.js"
WIDTHS = {"desktop": (1360, 900), "phone": (390, 844)}
SERIOUS = ("serious", "critical")


async def _axe_violations(page: Page) -> list[str]:
    """axe-core's serious and critical violations of the page, as 'rule: target' lines."""
    await page.add_script_tag(path=str(AXE))
    found: list[dict[str, Any]] = await page.evaluate(
        "async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
    )
    return [
        f"{v['id']} ({v['impact']}): {[n['target'] for n in v['nodes']][:3]}"
        for v in found
        if v["impact"] in SERIOUS
    ]


async def test_every_page_reads_at_desktop_and_phone_width_with_no_serious_axe_violation(
    site: Site, browser: Browser
) -> None:
    """Every page of the console, at 1360 and 390 px: axe-core (run in the same Chromium; the
    context bypasses the pages' CSP only to inject it) finds no serious or critical violation,
    and the page never scrolls sideways (wide tables scroll inside their box)."""
    assert AXE.is_file(), "axe-core is not installed: run `make tooling`"
    pages = {
        "login": "/console/login",
        "inbox": "/console/clusters",
        "inbox-all": "/console/clusters?status=all",
        "cluster": f"/console/clusters/{site.clusters[0]}",
        "consumers": "/console/consumers",
        "projects": "/console/threads",
        "threads": f"/console/threads?project={PROJECT}",
        "thread": f"/console/threads/{site.parent_thread}",
        "budgets": "/console/budgets",
        "not-found": "/console/nowhere",
    }
    problems: list[str] = []
    for width_name, (width, height) in WIDTHS.items():
        context = await browser.new_context(
            viewport={"width": width, "height": height}, bypass_csp=True
        )
        page = await context.new_page()
        await log_in(page, site, site.operator)
        for name, path in pages.items():
            if name == "login":
                await context.clear_cookies()
            response = await page.goto(f"{site.url}{path}")
            assert response is not None
            expected = 404 if name == "not-found" else 200
            assert response.status == expected, f"{path}: {response.status}"
            problems += [f"{width_name} {path}: {v}" for v in await _axe_violations(page)]
            overflow = await page.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            if overflow > 0:
                problems.append(f"{width_name} {path}: the page scrolls sideways by {overflow}px")
            if width_name == "phone":
                await shot(page, f"phone-{name}")
            if name == "login":
                await log_in(page, site, site.operator)
        await context.close()
    # The 403 page of a reader keeps the navigation too.
    context = await browser.new_context(viewport={"width": 390, "height": 844}, bypass_csp=True)
    page = await context.new_page()
    await log_in(page, site, site.reader)
    forbidden = await page.goto(f"{site.url}/console/threads")
    assert forbidden is not None
    assert forbidden.status == 403
    assert await page.locator("header nav a").count() >= 3
    problems += [f"phone 403: {v}" for v in await _axe_violations(page)]
    await context.close()
    assert problems == [], "\n".join(problems)
