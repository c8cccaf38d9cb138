"""freeze/thaw: a stop that has happened when the call returns, for every thread."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spectral.devstack import process
from spectral.devstack.process import freeze, pid_alive, thaw

# Four threads spinning on the CPU and one blocked in a read: the busy ones are the ones a
# plain kill(SIGSTOP) can leave running for a moment after it returned.
_BUSY = """
import sys, threading
def spin():
    while True:
        pass
for _ in range(4):
    threading.Thread(target=spin, daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def busy() -> Iterator[subprocess.Popen[str]]:
    child = subprocess.Popen(
        [sys.executable, "-c", _BUSY], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
        yield child
    finally:
        child.kill()
        child.wait(timeout=10)


def _states(pid: int) -> list[str]:
    return [
        (task / "stat").read_text().rsplit(") ", 1)[1][:1]
        for task in Path(f"/proc/{pid}/task").iterdir()
    ]


def test_freeze_returns_with_every_thread_stopped_and_thaw_with_none(
    busy: subprocess.Popen[str],
) -> None:
    for _ in range(20):
        freeze(busy.pid)
        states = _states(busy.pid)
        assert len(states) == 5
        assert set(states) == {"T"}
        thaw(busy.pid)
        assert "T" not in _states(busy.pid)


def test_freezing_a_process_that_is_gone_raises_and_thaw_of_a_gone_one_too() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=10)
    with pytest.raises(ProcessLookupError):
        freeze(child.pid)
    with pytest.raises(ProcessLookupError):
        thaw(child.pid)


def test_a_freeze_that_times_out_leaves_the_process_running(
    busy: subprocess.Popen[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A thread in uninterruptible sleep (D) does not stop until it wakes: freeze times out. Its
    # caller (LocalKafka.pause, outside the test's try/finally) never resumes it, so freeze must
    # not leave the process stopped once the sleeper wakes.
    monkeypatch.setattr(process, "_thread_states", lambda _pid: ["D"])
    with pytest.raises(TimeoutError):
        freeze(busy.pid, timeout=0.05)
    monkeypatch.undo()
    # The SIGSTOP freeze sent stops the threads within moments unless it was undone.
    deadline = time.monotonic() + 2.0
    while "T" in (states := _states(busy.pid)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "T" not in states


def test_a_command_name_holding_a_parenthesis_and_non_ascii_is_read_right() -> None:
    # /proc/PID/stat spells the name between parentheses as it is: ") Z" in it looked like a
    # zombie's state to a reader that split at the first ") ", and its UTF-8 bytes failed an
    # ASCII read.
    named = "import sys; open('/proc/self/comm', 'w').write('a) Z \\u00e9'); sys.stdin.read()"
    child = subprocess.Popen([sys.executable, "-c", named], stdin=subprocess.PIPE)
    try:
        comm = Path(f"/proc/{child.pid}/comm")
        deadline = time.monotonic() + 10
        while "a) Z" not in comm.read_text(errors="replace"):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert pid_alive(child.pid)
        freeze(child.pid)
        assert set(_states(child.pid)) == {"T"}
        thaw(child.pid)
    finally:
        child.kill()
        child.wait(timeout=10)
