"""The example plugin (examples/deploy-tracker), installed as a team would install it, run end
to end by spectral's own commands — with no change to spectral — and by its own tests through
spectral's pytest plugin (spectral.testing).

The package is installed into a folder of its own that only these subprocesses put on their
path, so the rest of the suite never sees the plugin."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp_types import TextContent

from spectral.devstack.ports import free_port
from tests.integration.replay.support import fetchval
from tests.support import transport
from tests.unit.contracts.test_asyncapi import official_parser

pytestmark = pytest.mark.integration

ROOT: Final = Path(__file__).resolve().parents[3]
EXAMPLE: Final = ROOT / "examples" / "deploy-tracker"
BIN: Final = Path(sys.executable).parent
EVENT_TYPE: Final = "deploys.deploy.finished"

ANNOUNCE: Final = """
import asyncio, os, sys
from datetime import UTC, datetime
import asyncpg
from deploy_tracker.events import DeployFinished
from deploy_tracker.producer import announce

async def main() -> None:
    conn = await asyncpg.connect(os.environ["SPECTRAL_DATABASE_URL"])
    deploys = [
        DeployFinished(deploy_id=f"d-{n}", service=service, outcome=outcome,
                       finished_at=datetime(2026, 1, 5, 9, n, tzinfo=UTC))
        for n, (service, outcome) in enumerate(
            [("api", "succeeded"), ("api", "failed"), ("web", "succeeded"), ("", "failed")])
    ]
    async with conn.transaction():
        print(len(await announce(conn, deploys)))
    await conn.close()

asyncio.run(main())
"""


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The example installed (pip, no dependencies: spectral is already there) into a folder."""
    target = tmp_path_factory.mktemp("deploy-tracker-site")
    source = tmp_path_factory.mktemp("deploy-tracker-src") / "deploy-tracker"
    shutil.copytree(EXAMPLE, source)  # the build writes beside the sources: not in the checkout
    subprocess.run(
        [BIN / "pip", "install", "--quiet", "--no-deps", "--target", target, source],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return str(target)


LEGACY_ENTRY_POINTS: Final = """
[project.entry-points."spectral.events"]
deploy-tracker = "deploy_tracker.events:SPECS"

[project.entry-points."spectral.deployments"]
deploy-tracker = "deploy_tracker.projection:build"

[project.entry-points."spectral.migrations"]
deploy-tracker = "deploy_tracker.migrations"
"""

LEGACY_PROBE: Final = """
from spectral.cli.deployments import deployments, factory
from spectral.plugins import installed_migration_tracks, installed_plugins, installed_registry
assert "deploy-tracker" not in {p.name for p in installed_plugins()}  # no declaration
assert "deploys.deploy.finished" in installed_registry().event_types()
assert [t.plugin for t in installed_migration_tracks()] == ["deploy-tracker"]
assert not deployments().is_own("deploy-tracker")
print(factory("deploy-tracker").__module__)
"""


@pytest.fixture(scope="module")
def legacy_plugin_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The example as a plugin written against the first extension API installs it: the three
    entry-point groups spectral.events, spectral.deployments and spectral.migrations."""
    target = tmp_path_factory.mktemp("legacy-deploy-tracker-site")
    source = tmp_path_factory.mktemp("legacy-deploy-tracker-src") / "deploy-tracker"
    shutil.copytree(EXAMPLE, source)
    pyproject = source / "pyproject.toml"
    text = pyproject.read_text("utf-8")
    declared = (
        '[project.entry-points."spectral.plugins"]\n'
        'deploy-tracker = "deploy_tracker.plugin:PLUGIN"\n'
    )
    assert declared in text
    pyproject.write_text(text.replace(declared, LEGACY_ENTRY_POINTS), "utf-8")
    subprocess.run(
        [BIN / "pip", "install", "--quiet", "--no-deps", "--target", target, source],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return str(target)


def test_a_plugin_of_the_first_api_still_adds_its_events_deployment_and_migrations(
    spectral_env: dict[str, str], legacy_plugin_path: str
) -> None:
    env = {**spectral_env, "PYTHONPATH": legacy_plugin_path}
    assert _run(env, BIN / "python", "-c", LEGACY_PROBE).strip() == "deploy_tracker.projection"
    migrated = _spectral(env, "db", "migrate")
    assert "deploy-tracker" in migrated
    assert "0002_outcomes_readers" in migrated


def _run(env: dict[str, str], *args: str | Path, cwd: Path = ROOT) -> str:
    result = subprocess.run(
        [str(a) for a in args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, f"{args}: {result.stdout}\n{result.stderr}"
    return result.stdout


def _with_login(url: str, login: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"{login}@{host}", query=transport(url)).geturl()


def _spectral(env: dict[str, str], *args: str | Path) -> str:
    return _run(env, BIN / "spectral", *args)


def _json(env: dict[str, str], *args: str | Path) -> Any:
    return json.loads(_spectral(env, *args, "--json"))


async def test_every_ops_command_runs_the_plugin_deployment(
    spectral_env: dict[str, str], database_url: str, plugin_path: str, tmp_path: Path
) -> None:
    env = {**spectral_env, "PYTHONPATH": plugin_path}
    prefix = env["SPECTRAL_TOPIC_PREFIX"]
    topic = f"{prefix}{EVENT_TYPE}"

    def ops() -> None:
        assert "deploy-tracker" in _spectral(env, "db", "migrate")  # its own track
        assert topic in json.dumps(_json(env, "topics", "plan"))  # the plugin's topics too
        assert _run(env, BIN / "python", "-c", ANNOUNCE).strip() == "4"  # the outbox
        _spectral(env, "outbox", "relay", "--once")
        _spectral(env, "consume", "deploy-tracker", "--stop-when-idle", "1")

    await asyncio.to_thread(ops)
    assert await fetchval(database_url, "SELECT count(*) FROM deploys.deploys") == 3

    def replay_and_dead_letters() -> None:
        replayed = _json(env, "replay", "deploy-tracker", "--from-beginning")
        assert replayed["complete"] is True
        assert replayed["applied"] == 0
        assert replayed["deduplicated"] == 3
        shown = _json(env, "dlq", "show", "--topic", topic, "--offset", "0")
        assert shown["reason"] == "handler_rejected"
        assert shown["consumer"] == "deploy-tracker"
        assert shown["envelope"]["event_type"] == EVENT_TYPE  # decoded with the plugin's spec
        reset = _json(env, "offsets", "reset", "deploy-tracker", "--to-earliest", "--dry-run")
        assert reset, reset

    await asyncio.to_thread(replay_and_dead_letters)

    await fetchval(database_url, "UPDATE deploys.service_outcomes SET deploys = 99 RETURNING 1")
    rebuilt = await asyncio.to_thread(_json, env, "rebuild", "deploy-tracker")
    assert rebuilt["committed"] is True
    assert await fetchval(database_url, "SELECT sum(deploys) FROM deploys.service_outcomes") == 3

    out = tmp_path / "schemas"
    await asyncio.to_thread(
        _spectral, env, "contracts", "export", "--plugin", "deploy-tracker", "--dir", out
    )
    assert sorted(p.name for p in out.iterdir()) == [
        "asyncapi.json",
        f"{EVENT_TYPE}.v1.json",
    ]
    assert "deploy-tracker" in (out / "asyncapi.json").read_text()
    parsed = await asyncio.to_thread(official_parser, out / "asyncapi.json")
    assert parsed.returncode == 0, parsed.stdout + parsed.stderr


async def test_the_plugins_command_http_route_mcp_tool_and_scope(
    spectral_env: dict[str, str], database_url: str, plugin_path: str, tmp_path: Path
) -> None:
    """What the example adds beside its projection, used as its users would: its own command,
    a token with its own scope, its HTTP route (and the API's description of it) through
    `spectral api`, and its MCP tool through `spectral mcp` over stdio."""
    env = {**spectral_env, "PYTHONPATH": plugin_path}
    await asyncio.to_thread(_spectral, env, "db", "migrate")
    await fetchval(
        database_url,
        "INSERT INTO deploys.service_outcomes VALUES ('api', 'failed', 2, '2026-01-05T09:00Z'),"
        " ('web', 'succeeded', 1, '2026-01-05T09:01Z') RETURNING 1",
    )
    expected = [
        {"service": "api", "outcome": "failed", "deploys": 2, "last_at": "2026-01-05T09:00:00Z"},
        {"service": "web", "outcome": "succeeded", "deploys": 1, "last_at": "2026-01-05T09:01:00Z"},
    ]
    assert await asyncio.to_thread(_json, env, "deploys", "outcomes") == expected
    listed = await asyncio.to_thread(_spectral, env, "deploys", "outcomes", "--service", "web")
    assert listed.split()[:3] == ["web", "succeeded", "1"]
    wrong_login = subprocess.run(  # its command reports a refused login as spectral's do
        [BIN / "spectral", "deploys", "outcomes"],
        env={**env, "SPECTRAL_DATABASE_URL": _with_login(database_url, "nobody:wrong")},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert wrong_login.returncode == 2, wrong_login.stderr  # a configuration error
    assert wrong_login.stderr.startswith("error: connect: the database refused the settings")
    assert "Traceback" not in wrong_login.stderr

    reader = await asyncio.to_thread(
        _spectral, env, "tokens", "create", "--name", "deploys-reader", "--scope", "deploys:read"
    )
    other = await asyncio.to_thread(
        _spectral, env, "tokens", "create", "--name", "ops-reader", "--scope", "ops:read"
    )
    port = free_port()
    api = subprocess.Popen(
        [BIN / "spectral", "api", "--port", str(port)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            await _until_healthy(http, api)
            allowed = await http.get(
                "/deploys/outcomes", headers={"Authorization": f"Bearer {reader.strip()}"}
            )
            assert allowed.status_code == 200, allowed.text
            assert allowed.json() == expected
            refused = await http.get(
                "/deploys/outcomes", headers={"Authorization": f"Bearer {other.strip()}"}
            )
            assert refused.status_code == 403
            assert refused.json()["required_scope"] == "deploys:read"
            described = (await http.get("/openapi.json")).json()
            assert "/deploys/outcomes" in described["paths"]
            assert "`deploys:read`" in described["info"]["description"]
    finally:
        api.terminate()
        api.communicate(timeout=30)

    params = StdioServerParameters(
        command=str(BIN / "spectral"),
        args=["mcp"],
        env={**env, "SPECTRAL_API_TOKEN": reader.strip()},
        cwd=str(tmp_path),
    )
    async with Client(params, read_timeout_seconds=60) as client:
        result = await client.call_tool("deploy_outcomes", {"service": "api"})
        assert not result.is_error
        text = " ".join(c.text for c in result.content if isinstance(c, TextContent))
        assert '"deploys": 2' in text or '"deploys":2' in text
        lacking = await client.call_tool("consumer_lag", {})
        assert lacking.is_error  # the plugin's scope allows the plugin's tool, nothing more


async def _until_healthy(http: httpx.AsyncClient, server: subprocess.Popen[bytes]) -> None:
    for _ in range(600):
        if server.poll() is not None:
            stderr = server.stderr.read() if server.stderr else b""
            raise AssertionError(f"spectral api exited: {stderr!r}")
        try:
            if (await http.get("/healthz")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.1)
    raise AssertionError("spectral api did not answer within 60 s")


@pytest.mark.example
def test_the_example_passes_its_own_tests_through_spectral_testing(
    spectral_env: dict[str, str], plugin_path: str
) -> None:
    # The example's tests create their own databases and prefixes from an admin URL.
    env = {
        **{k: v for k, v in spectral_env.items() if k != "SPECTRAL_TOPIC_PREFIX"},
        "PYTHONPATH": plugin_path,
    }
    out = _run(env, BIN / "pytest", "-q", "-p", "no:cacheprovider", "tests", cwd=EXAMPLE)
    assert "3 passed" in out


def test_the_examples_projection_is_tested_with_no_broker_at_all(
    spectral_env: dict[str, str], plugin_path: str
) -> None:
    """Its in-memory test (spectral.testing.MemoryKafka) needs PostgreSQL only: with the Kafka
    address pointing where nothing listens, it passes all the same."""
    env = {
        **{k: v for k, v in spectral_env.items() if k != "SPECTRAL_TOPIC_PREFIX"},
        "SPECTRAL_KAFKA_BOOTSTRAP": "127.0.0.1:1",
        "PYTHONPATH": plugin_path,
    }
    out = _run(
        env,
        BIN / "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "tests/test_projection_in_memory.py",
        cwd=EXAMPLE,
    )
    assert "1 passed" in out
