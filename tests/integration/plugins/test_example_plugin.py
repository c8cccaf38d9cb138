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

import pytest

from tests.integration.replay.support import fetchval
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
    assert "2 passed" in out
