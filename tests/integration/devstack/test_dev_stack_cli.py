"""`spectral dev up | status | down` as a user types them: exports that child processes see, a
stack found from any directory, and `dev down --wipe` leaving nothing behind (as root the
PostgreSQL cluster lives outside the checkout, under /var/lib/spectral)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spectral.devstack.postgres import LocalPostgres

pytestmark = pytest.mark.integration

SPECTRAL = str(Path(sys.executable).with_name("spectral"))


def _env(tmp_path: Path, kafka_bootstrap: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECTRAL_")}
    env["XDG_STATE_HOME"] = str(tmp_path / "xdg")
    # Kafka comes from the session's broker; PostgreSQL is this test's own local stack.
    env["SPECTRAL_KAFKA_BOOTSTRAP"] = kafka_bootstrap
    return env


def _sh(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )


def test_dev_up_exports_status_from_elsewhere_and_down_wipe(
    tmp_path: Path, kafka_bootstrap: str
) -> None:
    checkout = tmp_path / "checkout"
    elsewhere = tmp_path / "elsewhere"
    checkout.mkdir()
    elsewhere.mkdir()
    env = _env(tmp_path, kafka_bootstrap)
    state = checkout / ".spectral"
    server = LocalPostgres(state)
    try:
        # eval "$(spectral dev up)": a child process of the shell sees the settings.
        up = _sh(
            f'eval "$({SPECTRAL} dev up)" && bash -c \'echo "db=$SPECTRAL_DATABASE_URL"; '
            'echo "state=$SPECTRAL_STATE_DIR"\'',
            checkout,
            env,
        )
        assert up.returncode == 0, up.stderr
        lines = dict(line.split("=", 1) for line in up.stdout.splitlines())
        assert lines["db"].startswith("postgresql://")
        assert lines["state"] == str(state)

        # From another directory, with nothing exported: the stack is found.
        status = _sh(f"{SPECTRAL} dev status", elsewhere, env)
        assert status.returncode == 0, status.stderr
        assert "postgres: running" in status.stdout, status.stdout

        data_dir = server.data_dir
        assert data_dir.exists()
        if os.geteuid() == 0:
            assert not data_dir.is_relative_to(checkout)  # why --wipe must reach outside

        # `dev up` in a second checkout starts that checkout's own stack (it never adopts the
        # remembered one), so its `make test` stops only what it started. (A copy of the state
        # home, so the pointer to the first stack survives for the steps below.)
        second = tmp_path / "second"
        second.mkdir()
        other = LocalPostgres(second / ".spectral")
        second_env = {**env, "XDG_STATE_HOME": str(tmp_path / "xdg2")}
        shutil.copytree(tmp_path / "xdg", tmp_path / "xdg2")
        try:
            again = _sh(f"{SPECTRAL} dev up && {SPECTRAL} dev down --wipe", second, second_env)
            assert again.returncode == 0, again.stderr
            assert str(second / ".spectral") in again.stdout
            assert not other.data_dir.exists()
            assert "postgres: running" in _sh(f"{SPECTRAL} dev status", checkout, env).stdout
        finally:
            other.stop(wipe=True)

        down = _sh(f"{SPECTRAL} dev down --wipe", elsewhere, env)
        assert down.returncode == 0, down.stderr
        assert not data_dir.exists()
        assert not data_dir.parent.exists()
        assert not state.exists()
        after = _sh(f"{SPECTRAL} dev status", elsewhere, env)
        assert "postgres: stopped" in after.stdout
    finally:
        server.stop(wipe=True)
