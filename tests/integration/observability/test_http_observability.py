"""The HTTP surfaces tell what they serve: `spectral api` (a real process, JSON logs) answers a
scripted mix of requests, then its metrics port carries requests by route template, method and
status class, their latencies and the authentication and authorization failures, with label
values from fixed sets; its log has one JSON line per request, without any token, and a start-up
line naming the address it listens on. `spectral mcp --transport http` the same."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest.mock import ANY

import httpx
from prometheus_client.parser import text_string_to_metric_families

from producers.work.plugin import WORK_READ
from tests.integration.api.support import mint

SPECTRAL = str(Path(sys.executable).with_name("spectral"))
ROOT = Path(__file__).resolve().parents[3]


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serving(args: list[str], env: dict[str, str], log: Path, port: int) -> Iterator[None]:
    with log.open("ab") as out:
        process = subprocess.Popen(
            [SPECTRAL, *args],
            cwd=ROOT,
            env={**env, "SPECTRAL_LOG_FORMAT": "json"},
            stdout=subprocess.DEVNULL,
            stderr=out,
        )
    try:
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None, log.read_text()
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        yield
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _samples(metrics_port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _value(
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def test_the_api_counts_times_and_logs_every_request(
    spectral_env: dict[str, str], database_url: str, tmp_path: Path
) -> None:
    reader = await mint(database_url, "observed-reader", WORK_READ)
    port, metrics_port = _port(), _port()
    log = tmp_path / "api.log"
    args = ["api", "--port", str(port), "--metrics-port", str(metrics_port)]
    with serving(args, spectral_env, log, port):
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=30) as http:
            assert http.get("/openapi.json").status_code == 200
            for _ in range(3):
                assert http.get("/projects/p/threads", params={"limit": "5"}).status_code == 401
            bearer = {"Authorization": f"Bearer {reader}"}
            assert (
                http.get("/projects/p/threads", params={"limit": "5"}, headers=bearer).status_code
                == 200
            )
            thread = "00000000-0000-0000-0000-000000000001"
            assert http.get(f"/threads/{thread}", headers=bearer).status_code == 404
            other = "00000000-0000-0000-0000-000000000002"
            assert http.get(f"/threads/{other}", headers=bearer).status_code == 404
            assert http.get("/clusters", headers=bearer).status_code == 403  # no triage:read
            for n in range(5):
                assert http.get(f"/no/such/path/{n}").status_code == 404
            assert http.request("BREW", "/projects/p/threads").status_code in {404, 405}
            assert http.get("/healthz").status_code == 200  # answered in front: not counted
        samples = _samples(metrics_port)
    total = "spectral_http_requests_total"
    assert (
        _value(
            samples, total, server="api", route="/openapi.json", method="GET", status_class="2xx"
        )
        == 1
    )
    assert (
        _value(
            samples,
            total,
            server="api",
            route="/projects/{project_id}/threads",
            method="GET",
            status_class="4xx",
        )
        == 3
    )
    assert (
        _value(
            samples,
            total,
            server="api",
            route="/projects/{project_id}/threads",
            method="GET",
            status_class="2xx",
        )
        == 1
    )
    # Two thread ids, one route template: the label never carries the path.
    assert (
        _value(
            samples,
            total,
            server="api",
            route="/threads/{thread_id}",
            method="GET",
            status_class="4xx",
        )
        == 2
    )
    assert (
        _value(samples, total, server="api", route="unmatched", method="GET", status_class="4xx")
        == 5
    )
    assert (
        _value(samples, total, server="api", route="unmatched", method="OTHER", status_class="4xx")
        + _value(
            samples,
            total,
            server="api",
            route="/projects/{project_id}/threads",
            method="OTHER",
            status_class="4xx",
        )
        == 1
    )
    failures = "spectral_http_auth_failures_total"
    assert (
        _value(
            samples,
            failures,
            server="api",
            route="/projects/{project_id}/threads",
            reason="authentication",
        )
        == 3
    )
    assert _value(samples, failures, server="api", route="/clusters", reason="authorization") == 1
    assert (
        _value(
            samples,
            "spectral_http_request_duration_seconds_count",
            server="api",
            route="/projects/{project_id}/threads",
            method="GET",
        )
        == 4
    )
    routes = {dict(labels).get("route") for (name, labels) in samples if name == total}
    assert not any(str(route).startswith("/no/") for route in routes)
    assert not any(
        (name == "spectral_http_requests_total" and dict(labels).get("route") == "/healthz")
        for name, labels in samples
    )

    lines = [json.loads(line) for line in log.read_text().splitlines()]  # every line is JSON
    requests = [line for line in lines if line.get("event") == "request"]
    assert len(requests) == 14
    first = requests[0]
    assert {"method", "route", "path", "status", "duration_ms", "client"} <= set(first)
    assert first["route"] == "/openapi.json"
    assert first["status"] == 200
    assert not any("limit" in line["path"] for line in requests)  # no query string
    assert reader not in log.read_text()
    assert reader.split("_", 1)[1][:12] not in log.read_text()
    started = [line for line in lines if line.get("event") == "listening"]
    assert {(s["server"], s["url"]) for s in started} >= {
        ("api", f"http://127.0.0.1:{port}"),
        ("metrics", f"http://127.0.0.1:{metrics_port}"),
    }


async def test_mcp_over_http_counts_its_requests_and_refusals(
    spectral_env: dict[str, str], tmp_path: Path
) -> None:
    port, metrics_port = _port(), _port()
    log = tmp_path / "mcp.log"
    args = [
        "mcp", "--transport", "http", "--port", str(port), "--metrics-port", str(metrics_port)
    ]  # fmt: skip
    with serving(args, spectral_env, log, port):
        with httpx.Client(timeout=30) as http:
            refused = http.post(
                f"http://127.0.0.1:{port}/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={"Authorization": "Bearer spt_not-a-real-token"},
            )
            assert refused.status_code == 401
            # answered in front of MCP, unauthenticated, the checks without their error texts
            deadline = time.monotonic() + 30
            while (ready := http.get(f"http://127.0.0.1:{port}/readyz")).status_code != 200:
                assert time.monotonic() < deadline, ready.text  # the first probe is under way
                time.sleep(0.2)
            assert ready.json()["checks"]["database"] == {"ok": True, "age_seconds": ANY}
            assert http.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
        samples = _samples(metrics_port)
    assert (
        _value(
            samples,
            "spectral_http_auth_failures_total",
            server="mcp",
            route="/mcp",
            reason="authentication",
        )
        == 1
    )
    assert (
        _value(
            samples,
            "spectral_http_requests_total",
            server="mcp",
            route="/mcp",
            method="POST",
            status_class="4xx",
        )
        == 1
    )
    text = log.read_text()
    assert "spt_not-a-real-token" not in text
    assert any(json.loads(line).get("event") == "listening" for line in text.splitlines())
