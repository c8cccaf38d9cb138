"""Whatever bytes a client puts in the headers the surfaces read (If-Match, If-None-Match,
Authorization, Cookie, X-Forwarded-*) or in the query string, on every route of the composed
app: a documented answer, never a 500.

The app runs in Starlette's test client (its own event loop, the real lifespan: the real pools
over this test's database); hypothesis draws the route, the bytes and whether a valid token
rides along (so the parsing behind authentication is reached too: a PATCH's If-Match, a GET's
If-None-Match).
"""

from __future__ import annotations

import http.client
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote_from_bytes

import orjson
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from starlette.routing import BaseRoute

from consumers.rule_candidates.plugin import TRIAGE_WRITE
from producers.work.plugin import WORK_BUDGET, WORK_CANCEL, WORK_SUBMIT
from spectral.auth.scopes import OPS_REDRIVE
from spectral.cli.api import compose_app, deployment_topics
from spectral.devstack import Endpoints
from spectral.settings import Settings
from tests.integration.api.support import mint, seed_clusters, served
from tests.integration.work.support import DOCUMENT, PROJECT, backlog

pytestmark = pytest.mark.integration

# What a real server lets through in a header value: any byte but CR, LF and NUL (h11 refuses
# those before an app sees them).
header_bytes = st.binary(max_size=120).map(
    lambda raw: raw.replace(b"\r", b"").replace(b"\n", b"").replace(b"\x00", b"")
)
tricky = st.sampled_from(
    [
        b'"\xb2"',
        b'"\xb3\xb9"',
        b'W/"\xc2\xb2"',
        b'"99999999999999999999999"',
        b'"-1"',
        b"*, *",
        b'"1",,,W/',
        b"Bearer \xff\xfe",
        b"Bearer spt_" + b"\xe9" * 43,
        b"spectral_session=\xff; spectral_session=",
        b"\xef\xbb\xbf127.0.0.1",
        b"::1, 999.1.1.1, [::1]:80",
        b"https, javascript",
        b"evil.example\xff:99999999",
    ]
)
# Entity-tag lists built from what a parser trusts too easily: digits, the latin-1 characters
# str.isdigit() calls digits (superscripts two, three and one: a header is latin-1 text), signs,
# spaces, weak prefixes, empty members.
entity_tag = st.builds(
    lambda weak, chars: weak + b'"' + b"".join(chars) + b'"',
    st.sampled_from([b"", b"W/", b"w/"]),
    st.lists(
        st.sampled_from([b"0", b"7", b"\xb2", b"\xb3", b"\xb9", b"-", b" ", b"+"]), max_size=22
    ),
)
entity_tags = st.lists(entity_tag | st.sampled_from([b"*", b"", b" "]), min_size=1, max_size=3).map(
    b",".join
)
hostile = header_bytes | tricky | entity_tags
HEADERS = [
    "If-Match",
    "If-None-Match",
    "Authorization",
    "Cookie",
    "X-Forwarded-For",
    "X-Forwarded-Proto",
    "X-Forwarded-Host",
    "Forwarded",
]


@dataclass(frozen=True)
class Target:
    method: str
    path: str
    body: Any


def targets(app: FastAPI, cluster: str) -> list[Target]:
    """Every route of the app with its path parameters filled (known ids where the route reads
    one, so its conditional headers are parsed; unknown names where a route would start work
    on Kafka)."""
    values = {
        "cluster_id": cluster,
        "thread_id": "6f1c2b1e-4d0a-4c59-9a57-1f0e9f3b7a10",
        "project_id": PROJECT,
        "document_id": DOCUMENT,
        "org_id": "acme",
        "scope_kind": "org",
        "scope_id": "acme",
        "topic": "no-such-topic",
        "deployment": "no-such-deployment",
    }
    found = []
    for route in api_routes(app.routes):
        path = re.sub(r"\{(\w+)(:\w+)?\}", lambda m: values[m.group(1)], route.path)
        for method in sorted(route.methods or ()):
            body: Any = {"notes": "checked"} if method == "PATCH" else {}
            found.append(Target(method, path, body))
    return found


def api_routes(routes: Sequence[BaseRoute]) -> Iterator[APIRoute]:
    """The app's routes, those of included routers too (FastAPI includes them lazily)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        included = getattr(route, "original_router", None)
        if included is not None:
            yield from api_routes(included.routes)


@dataclass
class Answer:
    status_code: int
    text: str


class RawClient:
    """Requests with header bytes exactly as given, over a real socket (http.client sends a
    header's bytes as they are; a test client that re-encodes text would not)."""

    def __init__(self, app: FastAPI, port: int) -> None:
        self.app = app
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def request(
        self, method: str, url: str, *, json: Any = None, headers: Sequence[tuple[bytes, bytes]]
    ) -> Answer:
        body = orjson.dumps(json) if json is not None else b""
        for attempt in range(2):
            try:
                self.conn.putrequest(method, url, skip_accept_encoding=True)
                for name, value in headers:
                    self.conn.putheader(name, value)
                self.conn.putheader("Content-Type", "application/json")
                self.conn.putheader("Content-Length", str(len(body)))
                self.conn.endheaders(body)
                response = self.conn.getresponse()
                try:
                    text = response.read().decode("utf-8", "replace")
                except ConnectionResetError:
                    # A request the HTTP parser refuses is answered (400) and its connection
                    # closed with the unread body still queued: the peer may reset the socket
                    # before the answer's body is read. Its status line was the answer.
                    self.conn.close()
                    self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                    text = ""
                return Answer(response.status, text)
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                if attempt:
                    raise
        raise AssertionError("unreachable")


@pytest.fixture
def client(
    settings: Settings, database_url: str, kafka_bootstrap: str, topics: dict[str, Any]
) -> Iterator[RawClient]:
    app = compose_app(settings, Endpoints(kafka_bootstrap, database_url), topics)
    with served(app) as port:
        raw = RawClient(app, port)
        try:
            yield raw
        finally:
            raw.conn.close()


@pytest.fixture
async def topics(settings: Settings, database_url: str) -> dict[str, Any]:
    return await deployment_topics(settings, database_url)


@pytest.fixture
async def world(database_url: str) -> tuple[str, str]:
    (cluster,) = await seed_clusters(database_url, 1)
    token = await mint(
        database_url, "everything", TRIAGE_WRITE, WORK_SUBMIT, WORK_CANCEL, WORK_BUDGET, OPS_REDRIVE
    )
    return str(cluster), token


def test_no_header_or_query_string_makes_a_500(client: RawClient, world: tuple[str, str]) -> None:
    cluster, token = world
    put = client.request(
        "PUT",
        f"/projects/{PROJECT}/documents/{DOCUMENT}",
        json=backlog("A"),
        headers=[(b"authorization", f"Bearer {token}".encode())],
    )
    assert put.status_code == 201, put.text
    # The report's example: superscript digits (latin-1 0xB2, 0xB3, 0xB9) in If-Match.
    for value in (b'"\xb2"', b'"\xb3\xb9"'):
        patched = client.request(
            "PATCH",
            f"/clusters/{cluster}",
            json={"notes": "x"},
            headers=[(b"authorization", f"Bearer {token}".encode()), (b"if-match", value)],
        )
        assert patched.status_code == 412, patched.text
    routes = targets(client.app, cluster)
    assert len(routes) > 25
    assert any(t.method == "PATCH" for t in routes)
    assert any(t.path.startswith("/console/") for t in routes)
    seen: set[int] = set()

    conditional = [t for t in routes if t.path.startswith(("/clusters/", "/documents/"))]
    patch = next(t for t in conditional if t.method == "PATCH")

    @settings(
        max_examples=400,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(
        target=st.sampled_from(routes) | st.sampled_from(conditional),
        sent=st.dictionaries(st.sampled_from(HEADERS), hostile, min_size=1),
        authenticated=st.booleans(),
        query=st.binary(max_size=60),
    )
    # The conditional checks are reached whatever the draw (400 draws reached them in most runs,
    # not in all): an authenticated PATCH with a stale entity tag and latin-1 bytes beside it.
    @example(
        target=patch,
        sent={"If-Match": b'"999999"', "X-Forwarded-Host": b"\xff\xfe"},
        authenticated=True,
        query=b"",  # a query that is not UTF-8 is refused (400) before the conditional checks
    )
    def send(target: Target, sent: dict[str, bytes], authenticated: bool, query: bytes) -> None:
        headers = [(name.lower().encode(), value) for name, value in sent.items()]
        if authenticated and "Authorization" not in sent:
            headers.append((b"authorization", f"Bearer {token}".encode()))
        if authenticated and "Cookie" not in sent:
            headers.append((b"cookie", f"spectral_session={token}".encode()))
        url = target.path + "?" + quote_from_bytes(query, safe="=&")
        response = client.request(
            target.method,
            url,
            json=target.body,
            headers=headers,
        )
        seen.add(response.status_code)
        # 503 is Kafka's answer on the operations pages while a group's coordinator loads (a
        # documented, retryable problem); every other 5xx is a defect.
        unavailable = response.status_code == 503 and "/problems/unavailable" in response.text
        assert response.status_code < 500 or unavailable, (target, sent, response.text)

    send()
    # The bytes reached the checks behind authentication, not only the 401 in front of them.
    assert {200, 401} <= seen, seen
    assert seen & {304, 412, 428}, seen
