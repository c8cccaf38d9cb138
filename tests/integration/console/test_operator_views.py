"""What an operator sees of the inbox and a cluster, over ASGI against the real database: the
inbox opens on open work with each cluster's summary, rule and trend, with counts per status
and severity; a cluster's page charts its failures from the projection's hourly record; text
holding characters that are not seen shows them as marks (and the API flags them)."""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import AsyncIterator
from uuid import UUID

import pytest

from consumers.rule_candidates.plugin import TRIAGE_READ, TRIAGE_WRITE
from spectral.settings import Settings
from tests.integration.api.support import Surface, surface
from tests.integration.rule_candidates.helpers import apply, deliveries, new_cluster, new_handler
from tests.integration.rule_candidates.helpers import snapshot as cluster_snapshot

pytestmark = pytest.mark.integration

SPOOFED = "invoice\u202efdp.exe\u200b scan"


def csrf_of(token: str) -> str:
    return hmac.new(token.encode(), b"spectral-console-csrf", hashlib.sha256).hexdigest()


@pytest.fixture
async def s(settings: Settings, database_url: str, kafka_bootstrap: str) -> AsyncIterator[Surface]:
    async with surface(settings, database_url, kafka_bootstrap) as served:
        yield served


async def _seed(database_url: str) -> dict[str, UUID]:
    ids = {name: new_cluster() for name in ("open", "dismissed", "spoofed")}
    await apply(
        database_url,
        new_handler(),
        deliveries(
            cluster_snapshot(ids["open"], failures=3, severity="high", summary="TLS check failed"),
            cluster_snapshot(ids["open"], minutes=5, failures=9, severity="high"),
            cluster_snapshot(ids["dismissed"], severity="high", summary="dismissed one"),
            cluster_snapshot(ids["spoofed"], severity="low", summary=SPOOFED),
        ),
    )
    return ids


async def _login(s: Surface, *scopes: object) -> str:
    token = await s.token("operator", *scopes)  # type: ignore[arg-type]
    s.http.cookies.set("spectral_session", token, path="/console")
    return token


async def test_the_inbox_opens_on_open_work_and_says_what_each_cluster_is(s: Surface) -> None:
    ids = await _seed(s.database_url)
    token = await _login(s, TRIAGE_WRITE)
    dismissed = await s.http.post(
        f"/console/clusters/{ids['dismissed']}",
        data={"csrf": csrf_of(token), "version": "0", "status": "dismissed", "notes": ""},
    )
    assert dismissed.status_code == 303, dismissed.text

    inbox = await s.http.get("/console/clusters")
    assert inbox.status_code == 200
    html = inbox.text
    listed = set(re.findall(r'data-cluster="([0-9a-f-]+)"', html))
    assert listed == {str(ids["open"]), str(ids["spoofed"])}  # dismissed is not open work
    assert "TLS check failed" not in html  # the latest snapshot's summary, not the first's
    assert "rule R7 failed on scan" in html
    assert f"rule {UUID(int=1)}" in html
    # The views carry their counts; open work is the current one.
    assert re.search(
        r'class="current" aria-current="page" data-view="open">Open work'
        r'<span class="n">2</span>',
        html,
    ), html
    assert re.search(r'data-view="dismissed">dismissed<span class="n">1</span>', html)
    assert re.search(r'data-view="all">All<span class="n">3</span>', html)
    # Open work by severity: one high, one low (the dismissed high one is not open).
    counts = html[html.index('id="open-by-severity"') :]
    assert re.search(r"sev-high\">high</span></a> <b>1</b>", counts)
    assert re.search(r"sev-low\">low</span></a> <b>1</b>", counts)
    # Each row has a trend line drawn on the server (no script).
    assert html.count('<svg class="spark"') == 2
    assert "<script" not in html
    # The spoofed summary is shown with its hidden characters as marks, never as they are.
    assert "\u202e" not in html
    assert "\u200b" not in html
    assert "⟨U+202E⟩" in html
    assert "⟨U+200B⟩" in html

    everything = await s.http.get("/console/clusters?status=all")
    assert str(ids["dismissed"]) in everything.text
    only = await s.http.get("/console/clusters?status=dismissed")
    assert set(re.findall(r'data-cluster="([0-9a-f-]+)"', only.text)) == {str(ids["dismissed"])}


async def test_a_cluster_page_charts_its_failures_and_reveals_hidden_text(s: Surface) -> None:
    ids = await _seed(s.database_url)
    await _login(s, TRIAGE_READ)
    page = await s.http.get(f"/console/clusters/{ids['open']}")
    assert page.status_code == 200
    chart = page.text[page.text.index('<svg class="chart"') :]
    chart = chart[: chart.index("</svg>")]
    # One signalled hour so far, holding the count of the first snapshot applied in it.
    assert "1 samples of failures" in chart
    assert chart.count('class="chart-dot"') == 1

    spoofed = await s.http.get(f"/console/clusters/{ids['spoofed']}")
    assert "\u202e" not in spoofed.text
    assert 'id="hidden-characters"' in spoofed.text
    assert '<span class="hidden-char" title="RIGHT-TO-LEFT OVERRIDE">⟨U+202E⟩</span>' in (
        spoofed.text
    )

    api = await s.client(TRIAGE_READ)
    async with api:
        detail = (await api.get(f"/clusters/{ids['spoofed']}")).json()
        plain = (await api.get(f"/clusters/{ids['open']}")).json()
    assert detail["evidence_bundle"][0]["summary"] == SPOOFED  # the text as it was sent
    flagged = {h["location"]: h["code_points"] for h in detail["hidden_characters"]}
    assert flagged["summary"] == ["U+202E", "U+200B"]
    assert flagged["evidence_bundle[0].summary"] == ["U+202E", "U+200B"]
    assert plain["hidden_characters"] == []


async def test_error_pages_keep_the_navigation_and_pages_name_their_icon(s: Surface) -> None:
    await _login(s, TRIAGE_READ)
    for path, status in (("/console/nowhere", 404), ("/console/threads", 403)):
        page = await s.http.get(path)
        assert page.status_code == status, path
        assert page.headers["content-type"].startswith("text/html"), path
        assert '<nav aria-label="Console">' in page.text, path
        assert 'href="/console/clusters"' in page.text, path
    inbox = await s.http.get("/console/clusters")
    assert 'rel="icon" href="/console/_static/favicon.svg"' in inbox.text
    icon = await s.http.get("/console/_static/favicon.svg")
    assert icon.status_code == 200
    assert icon.headers["content-type"].startswith("image/svg+xml")
    # Outside the console an unknown path is still a problem document.
    assert (await s.http.get("/nowhere")).headers["content-type"] == "application/problem+json"
