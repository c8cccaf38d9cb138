"""Not collected on its own (no ``test_`` prefix): test_killed_runner.py runs it as a pytest run
of its own, which starts what a test run starts — a broker (unless ``VICTIM_BROKER`` is 0) and a
process in a session of its own, as `spectral` processes are started — writes their pids and its
watchdog's to ``VICTIM_REPORT``, and waits to be killed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from spectral.devstack.kafka import LocalKafka
from spectral.devstack.kafka_jars import default_cache_dir
from tests import reaper


def test_start_a_broker_and_a_process_then_wait_to_be_killed(tmp_path: Path) -> None:
    started: dict[str, int] = {"runner": os.getpid(), "watchdog": reaper.watchdog().pid}
    if os.environ.get("VICTIM_BROKER", "1") != "0":
        broker = LocalKafka(tmp_path / "stack", default_cache_dir(), short_lived=True)
        broker.ensure_running()
        pid = broker.status().pid
        assert pid is not None
        started["broker"] = pid
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(900)"], start_new_session=True
    )
    started["child"] = child.pid
    report = Path(os.environ["VICTIM_REPORT"])
    report.with_suffix(".tmp").write_text(json.dumps(started), encoding="utf-8")
    report.with_suffix(".tmp").replace(report)
    time.sleep(900)
    raise AssertionError("the runner was to be killed")


def test_nothing() -> None:
    """A run that only starts a session (and with it the sweep of what dead runners left)."""
