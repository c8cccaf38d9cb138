"""A test run killed with SIGKILL leaves nothing running: neither the brokers it started nor the
processes it started in sessions of their own (tests/reaper.py). A real pytest run
(killed_runner_victim.py) starts a real broker and a detached process and is killed; they must be
gone within a bound: killed by the run's watchdog, or, when the watchdog was killed too, by the
next run's session start.

The victim runs get a scope of their own (``TEST_RUN_SCOPE``): the session start of any other
pytest process of the suite, running beside them, sweeps only what its own scope's dead runners
left, so what this test leaves running on purpose is stopped by the run it names, or by nobody."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spectral.devstack.process import pid_alive

pytestmark = pytest.mark.faults

ROOT = Path(__file__).resolve().parents[2]
VICTIM = Path(__file__).with_name("killed_runner_victim.py")
BOUND = 15.0  # seconds from the kill until everything the run started is gone


def _run_victim(
    tmp_path: Path, name: str, test: str, *, scoped: bool = True, **env: str
) -> subprocess.Popen[bytes]:
    scope = {"TEST_RUN_SCOPE": f"{ROOT}#killed-runner:{tmp_path}"} if scoped else {}
    with (tmp_path / f"{name}.log").open("ab") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-n",
                "0",
                "--basetemp",
                str(tmp_path / name),
                "-k",
                test,
                str(VICTIM),
            ],
            cwd=ROOT,
            env={**os.environ, **scope, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def _started(runner: subprocess.Popen[bytes], report: Path, log: Path) -> dict[str, int]:
    deadline = time.monotonic() + 240
    while not report.exists():
        assert runner.poll() is None, log.read_text(errors="replace")[-4000:]
        assert time.monotonic() < deadline, log.read_text(errors="replace")[-4000:]
        time.sleep(0.2)
    pids: dict[str, int] = json.loads(report.read_text(encoding="utf-8"))
    assert all(pid_alive(pid) for pid in pids.values()), pids
    return pids


def _gone_within(pids: dict[str, int], bound: float) -> float:
    started = time.monotonic()
    while alive := {name: pid for name, pid in pids.items() if pid_alive(pid)}:
        assert time.monotonic() - started < bound, f"still running after {bound}s: {alive}"
        time.sleep(0.1)
    return time.monotonic() - started


def _kill(*pids: int) -> None:
    for pid in pids:
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(300)
def test_the_watchdog_of_a_killed_run_kills_its_broker_and_its_processes(tmp_path: Path) -> None:
    report = tmp_path / "started.json"
    runner = _run_victim(tmp_path, "victim", "wait_to_be_killed", VICTIM_REPORT=str(report))
    pids: dict[str, int] = {}
    try:
        pids = _started(runner, report, tmp_path / "victim.log")
        runner.send_signal(signal.SIGKILL)
        runner.wait(timeout=10)
        left = {name: pid for name, pid in pids.items() if name not in {"runner", "watchdog"}}
        assert set(left) == {"broker", "child"}
        _gone_within({**left, "watchdog": pids["watchdog"]}, BOUND)
    finally:
        _kill(runner.pid, *pids.values())
    assert "killed" in (tmp_path / "victim" / "reaper.log").read_text(encoding="utf-8")


@pytest.mark.timeout(300)
def test_the_next_run_kills_what_a_run_killed_with_its_watchdog_left(tmp_path: Path) -> None:
    report = tmp_path / "started.json"
    runner = _run_victim(
        tmp_path, "victim", "wait_to_be_killed", VICTIM_REPORT=str(report), VICTIM_BROKER="0"
    )
    pids: dict[str, int] = {}
    try:
        pids = _started(runner, report, tmp_path / "victim.log")
        _kill(pids["watchdog"], runner.pid)
        runner.wait(timeout=10)
        time.sleep(1.0)
        assert pid_alive(pids["child"])  # nobody stopped it
        # Another run of the suite, starting meanwhile, sweeps its own scope only.
        other = _run_victim(tmp_path, "other", "nothing", scoped=False)
        assert other.wait(timeout=120) == 0, (tmp_path / "other.log").read_text(errors="replace")
        assert pid_alive(pids["child"])
        after = _run_victim(tmp_path, "next", "nothing")
        assert after.wait(timeout=120) == 0, (tmp_path / "next.log").read_text(errors="replace")
        _gone_within({"child": pids["child"]}, BOUND)
    finally:
        _kill(runner.pid, *pids.values())
