"""`spectral mcp` driven by the MCP SDK's own client against the real database: the stdio
server as an agent starts it, the streamable HTTP server with bearer tokens, and every tool
under every scope."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent

from consumers.rule_candidates.plugin import TRIAGE_READ, TRIAGE_WRITE
from producers.work.plugin import WORK_CANCEL, WORK_READ
from spectral.api.resources import Resources
from spectral.auth.scopes import OPS_READ, installed_vocabulary
from spectral.cli.mcp import build_mcp
from spectral.devstack.ports import free_port
from spectral.ops.views import Deployment
from spectral.settings import Settings
from tests.integration.api.support import mint, seed_clusters
from tests.support import database_login

pytestmark = pytest.mark.integration

SPECTRAL = str(Path(sys.executable).with_name("spectral"))
TOOLS = {
    "list_failure_clusters": TRIAGE_READ,
    "get_cluster_detail": TRIAGE_READ,
    "triage_cluster": TRIAGE_WRITE,
    "get_thread": WORK_READ,
    "get_thread_history": WORK_READ,
    "list_project_threads": WORK_READ,
    "cancel_work_thread": WORK_CANCEL,
    "get_org_budget": WORK_READ,
    "get_budget": WORK_READ,
    "dead_letter_summary": OPS_READ,
    "list_dead_letters": OPS_READ,
    "consumer_lag": OPS_READ,
}
UNKNOWN_IDS = {
    "get_thread": "no thread",
    "get_thread_history": "no thread",
    "cancel_work_thread": "no thread",
    "get_org_budget": "has no budget",
    "get_budget": "has no budget",
}


def _text(result: CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, TextContent))


def _data(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, _text(result)
    if isinstance(result.structured_content, dict):
        return result.structured_content
    parsed: dict[str, Any] = json.loads(_text(result))
    return parsed


async def test_an_agent_triages_over_stdio(
    settings: Settings, database_url: str, spectral_env: dict[str, str], tmp_path: Path
) -> None:
    first, second = await seed_clusters(database_url, 2)
    token = await mint(database_url, "ops-agent", TRIAGE_WRITE, WORK_READ)
    env = {**spectral_env, "SPECTRAL_API_TOKEN": token}
    params = StdioServerParameters(command=SPECTRAL, args=["mcp"], env=env, cwd=str(tmp_path))
    async with Client(params, read_timeout_seconds=60) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert set(TOOLS) <= names
        listed = _data(await client.call_tool("list_failure_clusters", {"limit": 1}))
        assert len(listed["clusters"]) == 1
        assert listed["next_cursor"]
        rest = _data(
            await client.call_tool("list_failure_clusters", {"cursor": listed["next_cursor"]})
        )
        seen = {listed["clusters"][0]["cluster_id"], *(c["cluster_id"] for c in rest["clusters"])}
        assert seen == {str(first), str(second)}
        detail = _data(await client.call_tool("get_cluster_detail", {"cluster_id": str(first)}))
        assert detail["evidence_bundle"]
        assert detail["allowed_statuses"] == ["in_review", "dismissed", "resolved"]
        done = _data(
            await client.call_tool(
                "triage_cluster",
                {
                    "cluster_id": str(first),
                    "status": "dismissed",
                    "notes": "known flaky scanner",
                    "expected_version": detail["triage_version"],
                },
            )
        )
        assert done["status"] == "dismissed"
        assert done["audit"][-1]["actor"] == "token:ops-agent"
        stale = await client.call_tool(
            "triage_cluster",
            {"cluster_id": str(first), "notes": "again", "expected_version": 0},
        )
        assert stale.is_error
        assert "reload it" in _text(stale)
        # Like the HTTP API's If-Match, the version is required ('*' overwrites).
        unversioned = await client.call_tool(
            "triage_cluster", {"cluster_id": str(first), "notes": "blind write"}
        )
        assert unversioned.is_error
        assert "expected_version" in _text(unversioned)
        refused = await client.call_tool(
            "triage_cluster",
            {"cluster_id": str(first), "status": "resolved", "expected_version": "*"},
        )
        assert refused.is_error
        assert "allowed from dismissed" in _text(refused)
        missing = await client.call_tool("get_cluster_detail", {"cluster_id": str(uuid.uuid4())})
        assert missing.is_error
        assert "no rule candidate" in _text(missing)
        bad_id = await client.call_tool("get_cluster_detail", {"cluster_id": "x\x00y"})
        assert bad_id.is_error
        nul = await client.call_tool(
            "triage_cluster",
            {"cluster_id": str(second), "notes": "a\x00b", "expected_version": "*"},
        )
        assert nul.is_error
        no_scope = await client.call_tool("consumer_lag", {})
        assert no_scope.is_error
        assert "ops:read" in _text(no_scope)


async def test_stdio_refuses_to_start_without_a_live_token(
    spectral_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**spectral_env, "SPECTRAL_API_TOKEN": "spt_" + "A" * 43}
    done = await asyncio.to_thread(
        subprocess.run,
        [SPECTRAL, "mcp"],
        env=env,
        cwd=tmp_path,
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "SPECTRAL_API_TOKEN" in done.stderr
    assert "spt_AAAA" not in done.stderr


@contextmanager
def http_server(
    env: dict[str, str], cwd: Path, stderr: list[bytes] | None = None, *options: str
) -> Iterator[str]:
    """`spectral mcp --transport http` on a free port; its stderr is appended to ``stderr``
    once it has stopped."""
    port = free_port()
    process = subprocess.Popen(
        [SPECTRAL, "mcp", "--transport", "http", "--port", str(port), *options],
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            _, err = process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            _, err = process.communicate()
        if stderr is not None:
            stderr.append(err)


def _wait_for_port(port: int, process: subprocess.Popen[bytes]) -> None:
    import time  # noqa: PLC0415

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(
                f"spectral mcp exited: {process.stderr.read() if process.stderr else ''!r}"
            )
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError("spectral mcp --transport http did not listen within 60 s")


@asynccontextmanager
async def http_client(url: str, token: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        yield client


async def test_streamable_http_needs_a_bearer_token(
    settings: Settings, database_url: str, spectral_env: dict[str, str], tmp_path: Path
) -> None:
    (cluster,) = await seed_clusters(database_url, 1)
    writer = await mint(database_url, "agent-http", TRIAGE_WRITE)
    reader = await mint(database_url, "agent-reader", WORK_READ)
    with http_server(spectral_env, tmp_path) as url:
        async with httpx.AsyncClient(timeout=30) as raw:
            hello = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            for headers in ({}, {"Authorization": "Bearer spt_" + "B" * 43}):
                refused = await raw.post(url, json=hello, headers=headers)
                assert refused.status_code == 401
                assert "Bearer" in refused.headers["www-authenticate"]
        async with http_client(url, writer) as client:
            done = _data(
                await client.call_tool(
                    "triage_cluster",
                    {"cluster_id": str(cluster), "status": "in_review", "expected_version": 0},
                )
            )
            assert done["audit"][-1]["actor"] == "token:agent-http"
        async with http_client(url, reader) as client:
            refused_tool = await client.call_tool(
                "get_cluster_detail", {"cluster_id": str(cluster)}
            )
            assert refused_tool.is_error
            assert "triage:read" in _text(refused_tool)


async def test_the_http_server_answers_health_and_metrics(
    spectral_env: dict[str, str], tmp_path: Path
) -> None:
    """An orchestrator probes the MCP server as it probes the API: /healthz and /readyz on its
    port with no token (and no error text), and /metrics beside them on --metrics-port."""
    metrics_port = free_port()
    with http_server(spectral_env, tmp_path, None, "--metrics-port", str(metrics_port)) as url:
        base = url.removesuffix("/mcp")
        async with httpx.AsyncClient(timeout=30) as raw:
            live = await raw.get(f"{base}/healthz")
            assert live.status_code == 200, live.text
            # Not ready until the first database probe has answered (a loaded machine can take
            # seconds): an orchestrator polls, so does this test.
            deadline = asyncio.get_running_loop().time() + 60
            ready = await raw.get(f"{base}/readyz")
            while ready.status_code == 503 and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.2)
                ready = await raw.get(f"{base}/readyz")
            assert ready.status_code == 200, ready.text
            assert ready.json()["checks"]["database"]["ok"] is True
            assert "detail" not in ready.json()["checks"]["database"]
            metrics = await raw.get(f"http://127.0.0.1:{metrics_port}/metrics")
            assert metrics.status_code == 200
            assert "process_cpu_seconds_total" in metrics.text or "python_info" in metrics.text
            assert (await raw.get(f"http://127.0.0.1:{metrics_port}/readyz")).status_code == 200
            assert (await raw.post(url, json={})).status_code == 401  # the tools still need one


async def test_every_line_of_the_http_server_is_json(
    spectral_env: dict[str, str], tmp_path: Path
) -> None:
    """With SPECTRAL_LOG_FORMAT=json every line is JSON, the web server's own included (a
    malformed request makes uvicorn warn)."""
    assert spectral_env["SPECTRAL_LOG_FORMAT"] == "json"
    stderr: list[bytes] = []
    with http_server(spectral_env, tmp_path, stderr) as url:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            raw.sendall(b"NOT HTTP\r\n\r\n")
            assert raw.recv(100).startswith(b"HTTP/1.1 400")
    lines = [line for line in stderr[0].decode().splitlines() if line.strip()]
    assert any("Invalid HTTP request" in line for line in lines), lines
    for line in lines:
        json.loads(line)


async def test_every_tool_under_every_scope(
    settings: Settings, database_url: str, kafka_bootstrap: str
) -> None:
    (cluster,) = await seed_clusters(database_url, 1)
    topic = f"{settings.topic_prefix}platform.failure_cluster.detected"
    arguments: dict[str, dict[str, Any]] = {
        "list_failure_clusters": {},
        "get_cluster_detail": {"cluster_id": str(cluster)},
        "triage_cluster": {"cluster_id": str(cluster), "notes": "seen", "expected_version": "*"},
        "get_thread": {"thread_id": str(uuid.uuid4())},
        "get_thread_history": {"thread_id": str(uuid.uuid4())},
        "list_project_threads": {"project_id": "p1"},
        "cancel_work_thread": {"thread_id": str(uuid.uuid4()), "reason": "test"},
        "get_org_budget": {"org_id": "acme"},
        "get_budget": {"scope_kind": "route", "scope_id": "openai/gpt-4o"},
        "dead_letter_summary": {},
        "list_dead_letters": {"topic": topic},
        "consumer_lag": {},
    }
    resources = Resources(settings, database_url, kafka_bootstrap)
    deployments = [Deployment("rule-candidates", "rule-candidates", (topic,))]
    await resources.open()
    try:
        for scope in installed_vocabulary().scopes:
            token = await mint(database_url, f"only-{scope.name.replace(':', '-')}", scope)
            server = build_mcp(resources, deployments, stdio_token=token)
            async with Client(server) as client:
                for tool, needed in TOOLS.items():
                    result = await client.call_tool(tool, arguments[tool])
                    lacks = "lacks the scope" in _text(result)
                    assert lacks == (
                        needed.name not in installed_vocabulary().effective([scope.name])
                    ), (tool, scope, _text(result))
                    if not lacks and tool in UNKNOWN_IDS:
                        assert result.is_error  # an unknown id: a clear error, not a crash
                        assert UNKNOWN_IDS[tool] in _text(result)
                    elif not lacks:
                        assert not result.is_error, (tool, _text(result))
    finally:
        await resources.close()
    assert os.environ.get("SPECTRAL_API_TOKEN") is None


async def test_an_mcp_login_needs_no_grant_beyond_reading_and_triage(
    database_url: str, spectral_env: dict[str, str], tmp_path: Path
) -> None:
    """Its tools read and triage: the MCP server acts as the authenticator and the operator only
    (invariant 8), so a login granted those two runs it — it never opens a session as
    spectral_producer, which could write work items and the outbox."""
    (cluster,) = await seed_clusters(database_url, 1)
    token = await mint(database_url, "ops-agent-min", TRIAGE_READ)
    roles = ("spectral_authenticator", "spectral_operator")
    async with database_login(database_url, *roles) as (_, url):
        env = {**spectral_env, "SPECTRAL_API_TOKEN": token, "SPECTRAL_DATABASE_URL": url}
        params = StdioServerParameters(command=SPECTRAL, args=["mcp"], env=env, cwd=str(tmp_path))
        async with Client(params, read_timeout_seconds=60) as client:
            detail = _data(
                await client.call_tool("get_cluster_detail", {"cluster_id": str(cluster)})
            )
            assert detail["cluster_id"] == str(cluster)
