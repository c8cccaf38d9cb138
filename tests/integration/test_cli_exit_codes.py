"""A refused database login is a configuration error (exit 2) for every command that reads or
writes the database, not a crash and not "unavailable"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from spectral.devstack import Endpoints

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
]


def _wrong_password(url: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"spectral_nobody:wrong@{host}", query=""))


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
