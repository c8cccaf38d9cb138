"""What a caller who forges what the surfaces hand out gets back: a documented problem, never a
500. Cursors are opaque but not signed, so a client can write any keyset into one; form bodies
can come in any encoding a browser (or curl) can send."""

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
        # The cursors the listings hand out still page.
        first = await s.http.get("/clusters", params={"limit": "1"}, headers=bearer)
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
