"""Small helpers for the background processes of the local stack."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def pid_alive(pid: int | None) -> bool:
    """True when a process with this pid exists and is not a zombie."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _state(Path(f"/proc/{pid}/stat")) != "Z"


def terminate(pid: int, timeout: float) -> None:
    """SIGTERM, wait up to ``timeout`` seconds, then SIGKILL; returns once the pid is gone."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not pid_alive(pid):
                _reap(pid)
                return
            time.sleep(0.1)


def freeze(pid: int, timeout: float = 10.0) -> None:
    """SIGSTOP ``pid`` and return once every thread of it is stopped; when they do not all stop
    within ``timeout``, SIGCONT it and raise TimeoutError.

    ``kill`` only queues the signal: each thread stops when the kernel next schedules it, so a
    thread of a busy process (a broker's network thread) can still answer a request after the
    call returned. A fault test that then asserts "nothing answers" needs the stop itself."""
    os.kill(pid, signal.SIGSTOP)
    try:
        _await_states(pid, stopped=True, timeout=timeout)
    except TimeoutError:
        # A thread that does not stop (one in uninterruptible sleep) still stops once it wakes:
        # a failed pause must not leave the process stopped behind its caller's back (a caller
        # whose pause raised does not resume it).
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        raise


def thaw(pid: int, timeout: float = 10.0) -> None:
    """SIGCONT ``pid`` and return once no thread of it is stopped any more."""
    os.kill(pid, signal.SIGCONT)
    _await_states(pid, stopped=False, timeout=timeout)


def _await_states(pid: int, *, stopped: bool, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        states = _thread_states(pid)
        if not states or all((state in "Tt") == stopped for state in states):
            return
        if time.monotonic() > deadline:
            verb = "stop" if stopped else "continue"
            raise TimeoutError(f"process {pid} did not {verb} within {timeout} s: {states}")
        time.sleep(0.005)


def _thread_states(pid: int) -> list[str]:
    """The scheduler state letter of each live thread of ``pid`` (empty when it is gone)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return []
    states = (_state(task / "stat") for task in tasks)
    return [state for state in states if state not in ("", "Z", "X")]  # "": ended meanwhile


def _state(stat: Path) -> str:
    """The scheduler state letter in a ``/proc/.../stat`` file, "" when it cannot be read (the
    process or thread is gone). It follows the command name's closing parenthesis: the last one,
    since the name itself may hold ") ", and as bytes, since it need not be ASCII."""
    try:
        return stat.read_bytes().rsplit(b") ", 1)[1][:1].decode("ascii")
    except (OSError, IndexError, UnicodeDecodeError):
        return ""


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` for the duration of the block (between processes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
