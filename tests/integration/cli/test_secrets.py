"""No command prints a password given in the settings (a canary value)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

CANARY = "canary-7Hq2Lx"
SPECTRAL = str(Path(sys.executable).with_name("spectral"))


def _run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SPECTRAL, *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize(
    "args",
    [
        ("db", "migrate"),
        ("dev", "up"),
        ("dev", "status"),
        ("triage", "list"),
    ],
)
def test_passwords_in_settings_are_never_printed(args: tuple[str, ...]) -> None:
    env = _canary_env()
    result = _run(*args, env=env)
    assert (result.stdout + result.stderr).strip(), "the command said nothing at all"
    if args[0] in ("db", "triage"):
        assert result.returncode == 3  # server unavailable, said on stderr
        assert "error:" in result.stderr
    assert CANARY not in result.stdout
    assert CANARY not in result.stderr


def test_a_consumer_retrying_an_unreachable_database_logs_no_password() -> None:
    # An unreachable database is an outage: the consumer retries (and logs the outage's start,
    # with the error) until it is stopped.
    proc = subprocess.Popen(
        [SPECTRAL, "consume", "rule-candidates"],
        env=_canary_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    seen: list[str] = []

    def read_until_the_first_retry() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            seen.append(line)
            if "outage started" in line:
                return

    reader = threading.Thread(target=read_until_the_first_retry, daemon=True)
    reader.start()
    reader.join(timeout=60)  # a loaded machine may take seconds to import and try once
    proc.send_signal(signal.SIGTERM)
    stdout, rest = proc.communicate(timeout=60)
    stderr = "".join(seen) + rest
    assert "outage started" in stderr
    assert CANARY not in stdout
    assert CANARY not in stderr


def _canary_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECTRAL_")}
    env.update(
        {
            # Nothing listens on port 9: every command fails to connect, and says so.
            "SPECTRAL_DATABASE_URL": f"postgresql://app:{CANARY}@127.0.0.1:9/spectral",
            "SPECTRAL_KAFKA_BOOTSTRAP": "127.0.0.1:9",
            "SPECTRAL_KAFKA_SASL_PASSWORD": CANARY,
            "SPECTRAL_LOG_FORMAT": "json",
        }
    )
    return env
