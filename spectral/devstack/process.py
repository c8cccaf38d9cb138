"""Small helpers for the background processes of the local stack."""

from __future__ import annotations

import contextlib
import os
import signal
import time


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
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:  # noqa: PTH123
            return stat.read().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True


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


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
