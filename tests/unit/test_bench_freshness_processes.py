"""The freshness stage's processes (benchmarks/freshness.py) never outlive the window that
started them: a window that fails, or a process that never becomes ready, leaves no relay or
consumer running behind it (one such pair kept retrying against a dropped database for 80
minutes, taking CPU from every later run on the machine)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from benchmarks import freshness
from benchmarks.stack import BenchStack

_FAKE = """\
import http.server, os, sys
port = int(sys.argv[sys.argv.index("--metrics-port") + 1])
status = int(os.environ["FAKE_READY_STATUS"])
with open(os.environ["FAKE_PID_FILE"], "w") as out:
    out.write(str(os.getpid()))
class Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(status)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Ready).serve_forever()
"""


class _Stack:
    """What a window asks of its stack to start a process: the environment."""

    def env(self, url: str, *, topic_prefix: str) -> dict[str, str]:
        return {**os.environ, "SPECTRAL_DATABASE_URL": url, "SPECTRAL_TOPIC_PREFIX": topic_prefix}


@pytest.fixture
def fake_spectral(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``spectral`` replaced by a process that serves ``/readyz`` with FAKE_READY_STATUS and
    writes its pid to the returned file."""
    script = tmp_path / "fake-spectral"
    script.write_text(f"#!{sys.executable}\n{_FAKE}", encoding="utf-8")
    script.chmod(0o755)
    pid_file = tmp_path / "pid"
    monkeypatch.setattr(freshness, "spectral_executable", lambda: str(script))
    monkeypatch.setenv("FAKE_PID_FILE", str(pid_file))
    return pid_file


def _gone(pid_file: Path) -> bool:
    try:
        os.kill(int(pid_file.read_text(encoding="utf-8")), 0)
    except ProcessLookupError:
        return True
    return False


def _stack() -> BenchStack:
    return _Stack()  # type: ignore[return-value]  # the one method a spawn calls


async def test_a_window_that_fails_stops_the_processes_it_started(
    fake_spectral: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FAKE_READY_STATUS", "200")
    log = tmp_path / "relay.log"
    running: list[bool] = []

    async def window() -> None:
        async with freshness._running(_stack(), "url", "p.", log, "relay", "outbox", "relay"):
            running.append(not _gone(fake_spectral))
            raise ConnectionError("the window's database went away")

    with pytest.raises(ConnectionError):
        await window()
    assert running == [True]
    assert _gone(fake_spectral)


async def test_a_process_that_never_becomes_ready_is_stopped(
    fake_spectral: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FAKE_READY_STATUS", "503")
    monkeypatch.setattr(freshness, "READY_SECONDS", 1.0)
    with pytest.raises(RuntimeError, match="did not become ready"):
        await freshness._spawn(_stack(), "url", "p.", tmp_path / "c.log", "consumer", "consume")
    assert fake_spectral.exists()
    assert _gone(fake_spectral)


async def test_a_window_that_ends_well_keeps_the_exit_code_it_stopped_with(
    fake_spectral: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FAKE_READY_STATUS", "200")
    async with freshness._running(_stack(), "url", "p.", tmp_path / "r.log", "relay") as relay:
        code = await relay.stop()
    assert code != 0  # the fake has no SIGTERM handler: killed by the signal
    assert relay.proc.returncode == code
    assert _gone(fake_spectral)
