"""What a test run starts dies with it, however the run ends.

The tests start processes that must outlive a signal to their starter's process group: brokers
(the private 3-broker cluster of tests/cluster is three JVMs), PostgreSQL servers, `spectral`
processes in sessions of their own. A runner killed with SIGKILL (or by a CI job's time limit)
runs no finalizer, so they would keep running. Each pytest process therefore, at the start of
its session (:func:`start`):

* marks itself: ``TEST_RUN_OWNER`` in its environment names this checkout, its pid and its start
  time; every process it starts inherits the mark (the shared local stack excepted, which is
  reused across runs and stopped by `make test`: :func:`unowned`);
* starts a watchdog (this file as a script, standard library only, in a session of its own): it
  waits for the runner to exit (a pidfd, no polling), then kills every process that still
  carries the runner's mark and deletes the PostgreSQL data directories root keeps outside the
  runner's temporary directory for its servers. After a normal end nothing is left to kill;
* kills what a dead runner of this checkout left behind (its watchdog killed with it): marked
  processes whose runner is gone.

A mark's first part is its scope: this checkout, or ``TEST_RUN_SCOPE`` when that is set. A run
sweeps only what dead runners of its own scope left, so a test that kills a runner of its own on
purpose (tests/faults/test_killed_runner.py) gives it a scope of its own, and the session starts
of the suite's other pytest processes, running beside it, leave its leftovers to it.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

MARK = "TEST_RUN_OWNER"
ROOT = Path(__file__).resolve().parents[1]
SCOPE = os.environ.get("TEST_RUN_SCOPE") or str(ROOT)
"""Whose leftovers a run sweeps at its start: its checkout's, or a scope a test gave it."""
PG_SHARED_ROOT = Path("/var/lib/spectral")
"""Where a root runner's PostgreSQL servers keep their data (spectral/devstack/postgres.py)."""
_PASSES = 5


def _start_time(pid: int) -> str | None:
    """The start time of ``pid`` in clock ticks since boot (tells a reused pid apart)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return stat.rsplit(b") ", 1)[1].split()[19].decode("ascii")


def token_of(pid: int) -> str:
    """The mark of runner ``pid``: its scope, the pid and its start time."""
    return f"{SCOPE}|{pid}|{_start_time(pid)}"


def _alive(token: str) -> bool:
    """Whether the runner a mark names still runs (the same process, not a reused pid)."""
    _, pid, started = token.rsplit("|", 2)
    return pid.isdigit() and _start_time(int(pid)) == started


def _marks() -> Iterator[tuple[int, str]]:
    """(pid, mark) of every process carrying a mark (other users' processes are not readable)."""
    prefix = f"{MARK}=".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        for variable in environ.split(b"\0"):
            if variable.startswith(prefix):
                yield int(entry.name), variable[len(prefix) :].decode(errors="replace")
                break


def kill_marked(wanted: Callable[[str], bool]) -> list[int]:
    """SIGKILL every process whose mark ``wanted(mark)`` accepts, again until none is left
    (a dying process's child may start meanwhile); the pids killed."""
    killed: list[int] = []
    me = os.getpid()
    for _ in range(_PASSES):
        found = [pid for pid, mark in _marks() if pid != me and wanted(mark)]
        if not found:
            break
        for pid in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        killed.extend(found)
        time.sleep(0.2)
    return killed


def _remove_pg_data(basetemp: Path) -> list[Path]:
    """The data directories a root runner's PostgreSQL servers kept outside ``basetemp``
    (named by their owner file), deleted once their servers are gone."""
    removed = []
    for owner in PG_SHARED_ROOT.glob("*/owner"):
        try:
            state_dir = Path(owner.read_text(encoding="utf-8").strip())
        except OSError:
            continue
        if state_dir.is_relative_to(basetemp):
            shutil.rmtree(owner.parent, ignore_errors=True)
            removed.append(owner.parent)
    return removed


def watch(token: str, runner: int, basetemp: Path) -> None:
    """Wait for ``runner`` to exit, then kill what carries its mark (the watchdog's body)."""
    try:
        handle = os.pidfd_open(runner)
    except ProcessLookupError:
        pass  # gone already
    else:
        if _alive(token):  # the pid is still the runner's (not reused since)
            select.select([handle], [], [])
    killed = kill_marked(lambda mark: mark == token)
    removed = _remove_pg_data(basetemp) if killed else []
    if killed:
        sys.stderr.write(
            f"runner {runner} exited leaving {len(killed)} processes: killed {killed}; "
            f"removed {[str(p) for p in removed]}\n"
        )


_WATCHDOG: list[subprocess.Popen[bytes]] = []  # referenced for the session: never collected


def start(basetemp: Path) -> subprocess.Popen[bytes]:
    """Mark this process, start its watchdog and kill what dead runners of its scope left
    behind; the watchdog (its output goes to ``basetemp``/reaper.log)."""
    stale = kill_marked(lambda mark: mark.startswith(f"{SCOPE}|") and not _alive(mark))
    token = token_of(os.getpid())
    env = {k: v for k, v in os.environ.items() if k != MARK}
    with (basetemp / "reaper.log").open("ab") as log:
        if stale:
            log.write(f"killed {stale}, left by runners of {SCOPE} that are gone\n".encode())
        watchdog = subprocess.Popen(
            [sys.executable, "-I", "-S", __file__, token, str(os.getpid()), str(basetemp)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,  # a Ctrl-C or a signal to the runner's group spares it
        )
    _WATCHDOG.append(watchdog)
    os.environ[MARK] = token
    return watchdog


def watchdog() -> subprocess.Popen[bytes]:
    """This process's watchdog (:func:`start` first)."""
    return _WATCHDOG[0]


@contextlib.contextmanager
def unowned() -> Iterator[None]:
    """Processes started in the block do not die with the runner (the shared local stack)."""
    token = os.environ.pop(MARK, None)
    try:
        yield
    finally:
        if token is not None:
            os.environ[MARK] = token


if __name__ == "__main__":
    watch(sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]))
