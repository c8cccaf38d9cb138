"""`make` on a shared machine: while another process holds apt's locks (an upgrade, a sibling
checkout installing its packages), the Makefile's Debian installs wait for them, saying for
whom, instead of failing at once; past APT_LOCK_TIMEOUT they stop with a message naming the lock.

apt's locks are fcntl record locks (``flock(1)`` takes another kind, which apt never sees): the
holder here takes them the way another apt-get would. The package asked for is one the machine
already has (``prometheus``, for promtool), so apt takes its locks and changes nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("dpkg-lock")]

ROOT = Path(__file__).resolve().parents[2]
DPKG_LOCK = "/var/lib/dpkg/lock-frontend"
LISTS_LOCK = "/var/lib/apt/lists/lock"
HOLDER = """
import fcntl, sys, time
locks = []
for path in sys.argv[2:]:
    handle = open(path, "w")
    fcntl.lockf(handle, fcntl.LOCK_EX)
    locks.append(handle)
print("held", flush=True)
time.sleep(float(sys.argv[1]))
"""


def _hold(seconds: float, *paths: str) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(seconds), *paths],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "held"
    return holder


def _make(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        ["make", "--no-print-directory", "debian-package", "PACKAGE=prometheus", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
    )
    return done, time.monotonic() - started


def test_installs_wait_for_apts_locks_and_say_for_whom() -> None:
    """The holders let go only once make said it waits for them (never on a timer, so a loaded
    machine cannot make make come late to a lock already free): make was still running then,
    and finishes after."""
    assert os.geteuid() == 0, "the Makefile installs Debian packages as root (as CI runs it)"
    lists = _hold(600, LISTS_LOCK)
    dpkg = _hold(600, DPKG_LOCK)
    make = subprocess.Popen(
        ["make", "--no-print-directory", "debian-package", "PACKAGE=prometheus"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive", "APT_LOCK_TIMEOUT": "300"},
    )
    said: list[str] = []
    try:
        assert make.stderr is not None
        for line in make.stderr:
            said.append(line)
            if "waiting for apt's lists lock" in line and lists.poll() is None:
                assert make.poll() is None
                lists.kill()
            if "for the dpkg lock, held by" in line:
                assert make.poll() is None
                time.sleep(2)  # apt-get install is waiting on it meanwhile
                dpkg.kill()
        make.wait(timeout=300)
    finally:
        for process in (lists, dpkg, make):
            process.kill()
            process.wait()
    assert make.returncode == 0, said
    assert any("waiting for apt's lists lock" in line for line in said), said
    assert any(
        f"waiting (at most 300 s) for the dpkg lock, held by: {dpkg.pid}" in line for line in said
    ), said


def test_a_lock_held_past_the_timeout_stops_make_with_a_clear_message() -> None:
    dpkg = _hold(60, DPKG_LOCK)
    try:
        done, seconds = _make("APT_LOCK_TIMEOUT=3")
    finally:
        dpkg.kill()
        dpkg.wait()
    assert done.returncode != 0
    assert seconds < 45
    assert "another process held it for more than 3 s" in done.stderr
