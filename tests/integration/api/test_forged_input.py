"""What a caller who forges what the surfaces hand out gets back: a documented problem, never a
500. Cursors are signed, so neither a hand-written one (any keyset, the unsigned form of
before) nor an altered one is read; form bodies can come in any encoding a browser (or curl)
can send; a forwarded Host from a peer that is no configured proxy is not believed."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import pytest

from consumers.rule_candidates.plugin import TRIAGE_READ, TRIAGE_WRITE
from producers.work.plugin import WORK_READ
from spectral.settings import Settings
from tests.integration.api.support import seed_clusters, surface

pytestmark = pytest.mark.integration

UUID_TEXT = "6f1c2b1e-4d0a-4c59-9a57-1f0e9f3b7a10"


def forged(kind: str, key: list[Any]) -> str:
    raw = json.dumps({"k": kind, "p": key}).encode()  # any integer, unlike orjson
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


# Keysets of the right kind and length whose values the listing's query cannot bind: text where
# a number goes, numbers past bigint, exponents and non-numbers for numeric, UUID spellings.
CLUSTER_KEYS: list[list[Any]] = [
    [0, "abc", UUID_TEXT],
    [2**70, "1", UUID_TEXT],
    [1e30, "1", UUID_TEXT],
    [0, "1e100000", UUID_TEXT],
    [0, "NaN", UUID_TEXT],
    [0, "Infinity", UUID_TEXT],
    [0, 5, UUID_TEXT],
    [True, "1", UUID_TEXT],
    [0, "1", "{" + UUID_TEXT + "}"],
    [0, "1", UUID_TEXT.upper()],
]
THREAD_KEYS: list[list[Any]] = [
    ["0001-01-01T00:00:00+14:00", UUID_TEXT],
    ["9999-12-31T23:59:59-14:00", UUID_TEXT],
    ["2026-01-01T00:00:00", UUID_TEXT],
    [12345, UUID_TEXT],
    ["2026-01-01T00:00:00+00:00", "{" + UUID_TEXT + "}"],
]


async def test_a_forged_cursor_is_a_400_on_every_listing(
    settings: Settings, database_url: str, kafka_bootstrap: str
) -> None:
    await seed_clusters(database_url, 3)
    async with surface(settings, database_url, kafka_bootstrap) as s:
        token = await s.token("forger", TRIAGE_READ, WORK_READ)
        bearer = {"Authorization": f"Bearer {token}"}
        s.http.cookies.set("spectral_session", token, path="/console")
        for key in CLUSTER_KEYS:
            api = await s.http.get(
                "/clusters", params={"cursor": forged("clusters:severity", key)}, headers=bearer
            )
            assert api.status_code == 400, (key, api.text)
            assert api.json()["type"] == "/problems/invalid-cursor"
            page = await s.http.get(
                "/console/clusters", params={"cursor": forged("console-clusters:severity", key)}
            )
            assert page.status_code == 400, (key, page.text[:200])
        for key in THREAD_KEYS:
            threads = await s.http.get(
                "/projects/p1/threads",
                params={"cursor": forged("project-threads", key)},
                headers=bearer,
            )
            assert threads.status_code == 400, (key, threads.text)
            assert threads.json()["type"] == "/problems/invalid-cursor"
        # The cursors the listings hand out page; one altered anywhere is refused.
        first = await s.http.get("/clusters", params={"limit": "1"}, headers=bearer)
        handed_out = first.json()["next_cursor"]
        for where in range(len(handed_out)):
            flipped = "A" if handed_out[where] != "A" else "B"
            altered = handed_out[:where] + flipped + handed_out[where + 1 :]
            refused = await s.http.get("/clusters", params={"cursor": altered}, headers=bearer)
            assert refused.status_code == 400, (where, refused.text)
        again = await s.http.get(
            "/clusters",
            params={"limit": "1", "cursor": first.json()["next_cursor"]},
            headers=bearer,
        )
        assert again.status_code == 200, again.text
        assert again.json()["clusters"][0] != first.json()["clusters"][0]


async def test_a_multipart_form_gets_the_same_text_checks_as_an_urlencoded_one(
    settings: Settings, database_url: str, kafka_bootstrap: str
) -> None:
    """A browser posts a form urlencoded unless told otherwise, but anyone can post it as
    multipart/form-data: NUL or undecodable bytes in a field must be refused, not reach the
    database."""
    (cluster,) = await seed_clusters(database_url, 1)
    async with surface(settings, database_url, kafka_bootstrap) as s:
        token = await s.token("multipart", TRIAGE_WRITE)
        s.http.cookies.set("spectral_session", token, path="/console")
        csrf = hmac.new(token.encode(), b"spectral-console-csrf", hashlib.sha256).hexdigest()
        fields = {"version": "0", "csrf": csrf, "status": "in_review"}
        for notes in (b"a\x00b", b"a\xffb"):
            response = await s.http.post(
                f"/console/clusters/{cluster}", data=fields, files={"notes": (None, notes)}
            )
            assert response.status_code in (400, 415), (notes, response.status_code)
            assert response.headers["content-type"] == "application/problem+json"
        detail = await s.http.get(
            f"/clusters/{cluster}", headers={"Authorization": f"Bearer {token}"}
        )
        assert detail.json()["triage_version"] == 0


async def test_a_current_copy_is_a_304_and_a_stale_one_the_resource(
    settings: Settings, database_url: str, kafka_bootstrap: str
) -> None:
    (cluster,) = await seed_clusters(database_url, 1)
    async with surface(settings, database_url, kafka_bootstrap) as s:
        token = await s.token("cache", TRIAGE_WRITE)
        bearer = {"Authorization": f"Bearer {token}"}
        first = await s.http.get(f"/clusters/{cluster}", headers=bearer)
        etag = first.headers["ETag"]
        assert etag == '"0"'
        for tag in (etag, f"W/{etag}", f'"7", {etag}', "*"):
            again = await s.http.get(
                f"/clusters/{cluster}", headers={**bearer, "If-None-Match": tag}
            )
            assert again.status_code == 304, tag
            assert again.content == b""
            assert again.headers["ETag"] == etag
        changed = await s.http.patch(
            f"/clusters/{cluster}",
            json={"notes": "seen"},
            headers={**bearer, "If-Match": etag},
        )
        assert changed.headers["ETag"] == '"1"'
        stale = await s.http.get(f"/clusters/{cluster}", headers={**bearer, "If-None-Match": etag})
        assert stale.status_code == 200
        assert stale.json()["notes"] == "seen"
        # Without a valid token a 304 never answers (it would confirm the version).
        anonymous = await s.http.get(f"/clusters/{cluster}", headers={"If-None-Match": "*"})
        assert anonymous.status_code == 401


async def test_a_forwarded_host_counts_only_from_a_configured_proxy(
    settings: Settings, database_url: str, kafka_bootstrap: str
) -> None:
    """The login form refuses a post from another site; a client may not pass its own site off
    as ours with X-Forwarded-Host (the ASGI client of these requests is 127.0.0.1, so it is
    trusted by default and untrusted once the setting names another address)."""
    async with surface(settings, database_url, kafka_bootstrap) as s:
        token = await s.token("login", TRIAGE_READ)
        form = {"token": token, "next": ""}
        spoofed = {"Origin": "https://evil.example", "X-Forwarded-Host": "evil.example"}
        believed = await s.http.post("/console/login", data=form, headers=spoofed)
        assert believed.status_code == 303  # a configured proxy said the host is evil.example
    untrusting = settings.replace(forwarded_allow_ips="192.0.2.10")
    async with surface(untrusting, database_url, kafka_bootstrap) as s:
        refused = await s.http.post("/console/login", data=form, headers=spoofed)
        assert refused.status_code == 403
        assert "posted from another site" in refused.text  # the console's HTML problem page
        ours = await s.http.post("/console/login", data=form, headers={"Origin": "http://api"})
        assert ours.status_code == 303
