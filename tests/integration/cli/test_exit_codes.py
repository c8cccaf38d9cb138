"""A refused database login is a configuration error (exit 2) for every command that reads or
writes the database, not a crash and not "unavailable"."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from spectral.devstack import Endpoints
from tests.support import database_login, transport

pytestmark = pytest.mark.integration

SPECTRAL = str(Path(sys.executable).with_name("spectral"))
DATABASE_COMMANDS = [
    ["db", "migrate"],
    ["outbox", "status"],
    ["clusters", "list"],
    ["clusters", "tick"],
    ["triage", "list"],
    ["threads", "list", "--project", "p"],
    ["outbox", "relay", "--once"],
    ["tokens", "list"],
    ["mcp"],
    ["api", "--port", "0"],
    ["consume", "rule-candidates"],
]


def _wrong_password(url: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"spectral_nobody:wrong@{host}", query=transport(url)))


@pytest.mark.parametrize("args", DATABASE_COMMANDS, ids=" ".join)
def test_a_wrong_database_password_exits_2(args: list[str], stack: Endpoints) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECTRAL_")}
    env["SPECTRAL_KAFKA_BOOTSTRAP"] = stack.kafka_bootstrap
    env["SPECTRAL_DATABASE_URL"] = _wrong_password(stack.database_url)
    result = subprocess.run(
        [SPECTRAL, *args], env=env, capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "check SPECTRAL_DATABASE_URL" in result.stderr
    assert "wrong" not in result.stderr  # the password is never printed


ROLE_COMMANDS = [
    (["triage", "list"], "spectral_operator"),
    (["tokens", "list"], "spectral_token_admin"),
    (["api", "--port", "0"], "spectral_authenticator"),
    (["consume", "rule-candidates"], "spectral_projector"),
]


@pytest.fixture
async def login_without_grants(database_url: str) -> AsyncIterator[str]:
    """A database URL whose login exists but was granted none of spectral's roles."""
    async with database_login(database_url) as (_, url):
        yield url


@pytest.mark.parametrize(
    ("args", "role"), ROLE_COMMANDS, ids=lambda v: " ".join(v) if isinstance(v, list) else v
)
def test_a_login_without_the_role_grant_exits_2_naming_the_grant(
    args: list[str], role: str, stack: Endpoints, login_without_grants: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECTRAL_")}
    env["SPECTRAL_KAFKA_BOOTSTRAP"] = stack.kafka_bootstrap
    env["SPECTRAL_DATABASE_URL"] = login_without_grants
    result = subprocess.run(
        [SPECTRAL, *args], env=env, capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"GRANT {role} TO" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["api", "--port", "{busy}"],
        ["mcp", "--transport", "http", "--port", "{busy}"],
        ["api", "--port", "0", "--metrics-port", "{busy}"],
        ["api", "--port", "70000"],
        ["consume", "rule-candidates", "--metrics-port", "-1"],
        ["consume", "rule-candidates", "--stop-when-idle", "-1"],
        ["api", "--host", "no-such-host.invalid", "--port", "0"],
    ],
    ids=" ".join,
)
def test_a_port_it_cannot_listen_on_exits_2_in_one_line(
    args: list[str], spectral_env: dict[str, str]
) -> None:
    """A busy port, a port out of range or an address the machine lacks is a configuration
    error: exit 2 and one line, never uvicorn's start-up failure (exit 3) or a traceback."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        result = subprocess.run(
            [SPECTRAL, *(a.replace("{busy}", port) for a in args)],
            env=spectral_env,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
