"""`make test` (and test-cluster, test-slow, test-example) runs on the checkout's own local stack:
a SPECTRAL_STATE_DIR, SPECTRAL_KAFKA_BOOTSTRAP or SPECTRAL_DATABASE_URL the shell exported (another
checkout's stack) is not inherited, and the run says so; given on make's command line they are
used. The other targets keep following the environment.

The Makefile runs here for real, with its tools replaced: ``VENV`` names a folder whose fake
``pytest`` and ``spectral`` (and, for ``make test``, a fake ``MAKE`` standing for the build steps,
the stack's start and helm's compile) write down the stack variables they were started with."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OWN = str(ROOT / ".spectral")
VARIABLES = ("SPECTRAL_STATE_DIR", "SPECTRAL_KAFKA_BOOTSTRAP", "SPECTRAL_DATABASE_URL")
ELSEWHERE = {
    "SPECTRAL_STATE_DIR": "/elsewhere/.spectral",
    "SPECTRAL_KAFKA_BOOTSTRAP": "elsewhere:9092",
    "SPECTRAL_DATABASE_URL": "postgresql://spectral@elsewhere:5432/spectral",
}
TOOL = """#!/bin/sh
printf '%s %s|%s|%s|%s\\n' "$(basename "$0")" "$1" "${SPECTRAL_STATE_DIR-unset}" \\
    "${SPECTRAL_KAFKA_BOOTSTRAP-unset}" "${SPECTRAL_DATABASE_URL-unset}" >> "$TOOL_LOG"
"""


def _make(
    tmp_path: Path, target: str, *assignments: str, environment: dict[str, str] | None = None
) -> tuple[list[tuple[str, dict[str, str]]], str]:
    """Run ``make target`` with fake tools; each tool started, with the stack variables it saw
    ("unset" when absent), and make's output."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    for name in ("pytest", "spectral", "make"):
        tool = venv / "bin" / name
        tool.write_text(TOOL, encoding="utf-8")
        tool.chmod(0o755)
    (venv / ".installed-stamp").touch()  # newer than pyproject.toml: `install` is up to date
    log = tmp_path / "tools.log"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SPECTRAL_", "MAKE")) and k != "MFLAGS"
    }
    env.update(environment or {}, TOOL_LOG=str(log))
    done = subprocess.run(
        [
            "make",
            "--no-print-directory",
            target,
            f"VENV={venv}",
            f"MAKE={venv / 'bin' / 'make'}",
            f"HELM_TOOLS={tmp_path / 'helm'}",  # not the checkout's: a real `make test` runs this
            *assignments,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    runs = []
    for line in log.read_text(encoding="utf-8").splitlines():
        command, *values = line.split("|")
        runs.append((command, dict(zip(VARIABLES, values, strict=True))))
    return runs, done.stdout


def test_the_suite_does_not_inherit_another_checkouts_stack(tmp_path: Path) -> None:
    runs, out = _make(tmp_path, "test", environment=ELSEWHERE)
    # the build steps and the stack's start, helm's compile beside them (in either order), pytest,
    # the stack's stop
    commands = [command for command, _ in runs]
    assert sorted(commands[:-1]) == ["make --no-print-directory"] * 2 + ["pytest -q"]
    assert commands[0] == "make --no-print-directory"
    assert commands[-1] == "spectral dev"
    for _, seen in runs:
        assert seen == {
            "SPECTRAL_STATE_DIR": OWN,
            "SPECTRAL_KAFKA_BOOTSTRAP": "unset",
            "SPECTRAL_DATABASE_URL": "unset",
        }
    for variable in VARIABLES:
        assert f"{variable}" in out
    assert "/elsewhere/.spectral from the environment is not used" in out


@pytest.mark.parametrize("target", ["test-example", "test-slow"])
def test_every_test_target_starts_and_stops_the_checkouts_own_stack(
    tmp_path: Path, target: str
) -> None:
    runs, _ = _make(tmp_path, target, environment=ELSEWHERE)
    assert [command for command, _ in runs] == ["spectral dev", "pytest -q", "spectral dev"]
    assert {seen["SPECTRAL_STATE_DIR"] for _, seen in runs} == {OWN}
    assert {seen["SPECTRAL_DATABASE_URL"] for _, seen in runs} == {"unset"}


def test_a_stack_given_on_the_command_line_is_used(tmp_path: Path) -> None:
    chosen = {
        "SPECTRAL_STATE_DIR": "/chosen/.spectral",
        "SPECTRAL_KAFKA_BOOTSTRAP": "chosen:9092",
        "SPECTRAL_DATABASE_URL": "postgresql://spectral@chosen:5432/spectral",
    }
    runs, out = _make(
        tmp_path, "test", *(f"{k}={v}" for k, v in chosen.items()), environment=ELSEWHERE
    )
    assert len(runs) == 4  # the build steps, helm's compile, pytest, the stack's stop
    for _, seen in runs:
        assert seen == chosen
    assert "not used" not in out


def test_a_shell_exporting_the_checkouts_own_stack_runs_quietly(tmp_path: Path) -> None:
    runs, out = _make(tmp_path, "test", environment={"SPECTRAL_STATE_DIR": OWN})
    assert {seen["SPECTRAL_STATE_DIR"] for _, seen in runs} == {OWN}
    assert "not used" not in out
    runs, _ = _make(tmp_path / "bare", "test")
    assert {seen["SPECTRAL_STATE_DIR"] for _, seen in runs} == {OWN}


def test_the_stack_targets_keep_following_the_environment(tmp_path: Path) -> None:
    runs, out = _make(tmp_path, "down", environment=ELSEWHERE)
    assert runs == [("spectral dev", ELSEWHERE)]
    assert "not used" not in out
