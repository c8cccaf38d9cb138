"""compose.yaml's deployments run with the logins deploy/postgres/logins.sql creates, on a real
PostgreSQL and Kafka: each one, as its compose command (made one-shot), does its work with its
own login's role — and the API, unlike the owner's login, is not flagged as overprivileged."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import asyncpg
import httpx
import pytest
from ruamel.yaml import YAML

from tests.support import as_login, eventually

ROOT = Path(__file__).resolve().parents[2]
LOGINS_SQL = ROOT / "deploy" / "postgres" / "logins.sql"
OVERPRIVILEGED = "can do more than the API needs"

# The compose services that use the database, and how each is run once here (its own flags for
# that; the metrics port is dropped: tests share the machine).
ONE_SHOT: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # service: (flags removed with their value, flags added)
    "relay": (("--metrics-port",), ("--once",)),
    "rule-candidates": (("--metrics-port",), ("--stop-when-idle", "1")),
    "work-executor": (("--metrics-port",), ("--stop-when-idle", "1")),
    "clusters-tick": (("--metrics-port", "--every"), ()),
    "maintenance": (("--metrics-port", "--every"), ()),
}


ROLES = {
    "relay": "spectral_relay",
    "rule-candidates": "spectral_projector",
    "work-executor": "spectral_executor",
    "clusters-tick": "spectral_producer",
    "maintenance": "spectral_maintainer",
    "api": "spectral_api",
}


def _services() -> dict[str, Any]:
    compose: dict[str, Any] = YAML(typ="safe").load((ROOT / "compose.yaml").read_text())
    return dict(compose["services"])


def _one_shot(command: Sequence[str], removed: Sequence[str], added: Sequence[str]) -> list[str]:
    args = list(command[1:])  # without "spectral": this checkout's executable runs them
    for flag in removed:
        at = args.index(flag)
        del args[at : at + 2]
    return [str(Path(sys.executable).with_name("spectral")), *args, *added]


def _login_url(service: dict[str, Any], database_url: str) -> tuple[str, str]:
    """The service's compose login and password, on the test's server and database."""
    parts = urlsplit(service["environment"]["SPECTRAL_DATABASE_URL"])
    assert parts.username is not None
    assert parts.password is not None
    return parts.username, as_login(database_url, parts.username, parts.password)


@pytest.fixture
async def compose_logins(database_url: str) -> AsyncIterator[dict[str, Any]]:
    """logins.sql run as compose runs it (psql, the owner's URL, the compose password); the
    logins are server-wide, so they are dropped afterwards."""
    services = _services()
    command = list(services["logins"]["command"])
    psql = shutil.which("psql") or "/usr/lib/postgresql/15/bin/psql"
    owner = urlsplit(database_url)
    args = [psql, database_url, *command[2:-1], str(LOGINS_SQL)]
    env = {**os.environ, "PGPASSFILE": parse_qs(owner.query)["passfile"][0]}
    for _ in range(2):  # idempotent: a second run changes nothing and does not fail
        result = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
        assert result.returncode == 0, result.stderr
    try:
        yield services
    finally:
        conn = await asyncpg.connect(database_url)
        try:
            for name in ONE_SHOT.keys() | {"api"}:
                login, _ = _login_url(services[name], database_url)
                await conn.execute(f'DROP ROLE IF EXISTS "{login}"')
        finally:
            await conn.close()


async def _run(command: list[str], env: dict[str, str]) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *command, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=90)
    return proc.returncode or 0, out.decode(errors="replace")


async def test_every_deployment_runs_with_its_own_compose_login(
    compose_logins: dict[str, Any], database_url: str, spectral_env: dict[str, str]
) -> None:
    services = compose_logins
    conn = await asyncpg.connect(database_url)
    try:
        for name in ONE_SHOT.keys() | {"api"}:
            login, _ = _login_url(services[name], database_url)
            row = await conn.fetchrow(
                "SELECT rolsuper, rolinherit, rolcreaterole, rolcreatedb,"
                " array(SELECT b.rolname FROM pg_auth_members m JOIN pg_roles b"
                "  ON b.oid = m.roleid WHERE m.member = r.oid) AS member_of"
                " FROM pg_roles r WHERE rolname = $1",
                login,
            )
            assert row is not None, login
            flags = ("rolsuper", "rolinherit", "rolcreaterole", "rolcreatedb")
            assert [flag for flag in flags if row[flag]] == [], login
            assert row["member_of"] == [ROLES[name]], login
    finally:
        await conn.close()
    code, out = await _run(_one_shot(services["topics"]["command"], (), ()), spectral_env)
    assert code == 0, out[-3000:]
    runs = []
    for name, (removed, added) in ONE_SHOT.items():
        _, url = _login_url(services[name], database_url)
        command = _one_shot(services[name]["command"], removed, added)
        runs.append(_run(command, {**spectral_env, "SPECTRAL_DATABASE_URL": url}))
    for name, (code, out) in zip(ONE_SHOT, await asyncio.gather(*runs), strict=True):
        assert code == 0, f"{name}: exit {code}\n{out[-3000:]}"
        assert "permission denied" not in out, f"{name}\n{out[-3000:]}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _api_log(command: list[str], env: dict[str, str]) -> str:
    """Start the API, wait until it is ready, stop it: its log."""
    port = _free_port()
    proc = await asyncio.create_subprocess_exec(
        *command,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        async with httpx.AsyncClient() as client:

            async def ready() -> bool:
                assert proc.returncode is None, "the API exited"
                with contextlib.suppress(httpx.HTTPError):
                    return (await client.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200
                return False

            await eventually(ready, timeout=60)
    finally:
        if proc.returncode is None:
            proc.terminate()
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=30)
    return out.decode(errors="replace")


async def test_the_api_with_its_compose_login_is_not_flagged_and_the_owner_is(
    compose_logins: dict[str, Any], database_url: str, spectral_env: dict[str, str]
) -> None:
    service = compose_logins["api"]
    _, url = _login_url(service, database_url)
    command = [str(Path(sys.executable).with_name("spectral")), "api"]
    own, owner = await asyncio.gather(
        _api_log(command, {**spectral_env, "SPECTRAL_DATABASE_URL": url}),
        _api_log(command, spectral_env),
    )
    assert OVERPRIVILEGED not in own, own[-3000:]
    assert OVERPRIVILEGED in owner, owner[-3000:]


async def test_the_first_token_made_the_documented_way_opens_the_api(
    compose_logins: dict[str, Any],
    database_url: str,
    spectral_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """compose.yaml's header: `docker compose run --rm admin spectral tokens create …` (the
    admin service acts as the owner); the API, running as its own compose login, accepts it."""
    urls = {
        name: urlsplit(compose_logins[name]["environment"]["SPECTRAL_DATABASE_URL"])
        for name in ("admin", "migrate")
    }
    assert urls["admin"].username == urls["migrate"].username  # the owner
    spectral = str(Path(sys.executable).with_name("spectral"))
    made = subprocess.run(
        [spectral, "tokens", "create", "--name", "first", "--scope", "ops:read", "--json"],
        env=spectral_env,  # the owner's URL, on the test's database
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    token = json.loads(made.stdout)["token"]
    _, api_url = _login_url(compose_logins["api"], database_url)
    port = _free_port()
    proc = await asyncio.create_subprocess_exec(
        spectral, "api", "--host", "127.0.0.1", "--port", str(port),
        env={**spectral_env, "SPECTRAL_DATABASE_URL": api_url},
        stdout=asyncio.subprocess.DEVNULL, stderr=(tmp_path / "api.log").open("wb"),
    )  # fmt: skip
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:

            async def answers() -> bool:
                assert proc.returncode is None, (tmp_path / "api.log").read_text()
                with contextlib.suppress(httpx.HTTPError):
                    return (await client.get("/readyz")).status_code == 200
                return False

            await eventually(answers, timeout=60)
            bearer = {"Authorization": f"Bearer {token}"}
            assert (await client.get("/ops/consumers", headers=bearer)).status_code == 200
            assert (await client.get("/ops/consumers")).status_code == 401
    finally:
        if proc.returncode is None:
            proc.terminate()
        await asyncio.wait_for(proc.wait(), timeout=30)
