"""`spectral maintenance` as an operator and a deployment run it: from another directory, with
--dry-run and --json, and as a service (--every) that serves /metrics and stops on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.maintenance.support import generations
from tests.support import eventually

pytestmark = pytest.mark.integration

SPECTRAL = str(Path(sys.executable).with_name("spectral"))


def _maintenance(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SPECTRAL, "maintenance", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_dry_run_reports_and_changes_nothing_then_a_run_rotates(
    spectral_env: dict[str, str], database_url: str, tmp_path: Path
) -> None:
    dry = _maintenance(spectral_env, tmp_path, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    assert report["dry_run"] is True
    assert report["dedup"]["hold"] == "none"
    assert report["dedup"]["started_generation"] == 2
    assert report["outbox"]["started_generation"] == 2
    assert set(report["tables"]) == {"core.event_handled", "core.outbox"}
    assert [r["generation"] for r in asyncio.run(generations(database_url))] == [1]

    done = _maintenance(spectral_env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "dedup: horizon" in done.stdout
    assert "start generation 2 (nothing to forget yet)" in done.stdout
    assert [r["generation"] for r in asyncio.run(generations(database_url))] == [1, 2]


def test_a_setting_out_of_range_is_a_configuration_error(
    spectral_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**spectral_env, "SPECTRAL_OUTBOX_RETENTION_SECONDS": "0"}
    result = _maintenance(env, tmp_path)
    assert result.returncode == 2
    assert "outbox_retention_seconds" in result.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_every_runs_passes_serves_metrics_and_stops_on_sigterm(
    spectral_env: dict[str, str], database_url: str, tmp_path: Path
) -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [SPECTRAL, "maintenance", "--every", "1", "--metrics-port", str(port)],
        env=spectral_env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "maintenance.log").open("wb"),
    )
    try:

        async def two_passes() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    body = r.read().decode()
            except OSError:
                return False
            match = re.search(r'spectral_maintenance_runs_total\{outcome="ok"\} (\S+)', body)
            return match is not None and float(match[1]) >= 2

        await eventually(two_passes, timeout=60)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            body = r.read().decode()
        assert 'spectral_dedup_rotation_held{reason="too_recent"} 1.0' in body or (
            'spectral_dedup_rotation_held{reason="outbox"} 1.0' in body
        )
        assert 'spectral_table_bytes{table="core.event_handled"}' in body
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(asyncio.to_thread(proc.wait), 30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert [r["generation"] for r in await generations(database_url)] == [1, 2]


class _Pushgateway(BaseHTTPRequestHandler):
    """Records each push (method, path, body) the way a Pushgateway receives it."""

    pushes: ClassVar[list[tuple[str, str, str]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
        self.pushes.append(("POST", self.path, body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib's name
        """Quiet."""


def _pushed_sample(body: str, name: str) -> float | None:
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    return None


def test_a_one_shot_pass_pushes_its_series_and_a_failed_one_keeps_the_last_success(
    spectral_env: dict[str, str], tmp_path: Path
) -> None:
    """A CronJob's pass is scraped by nobody: it pushes its spectral_* series (no process_*
    series of a process that is gone) to the Pushgateway; a failed pass pushes its failure but
    not a success timestamp, so the one of the last success stays there for the alert."""
    _Pushgateway.pushes = []
    gateway = HTTPServer(("127.0.0.1", 0), _Pushgateway)
    threading.Thread(target=gateway.serve_forever, daemon=True).start()
    env = {**spectral_env, "SPECTRAL_METRICS_PUSHGATEWAY": f"127.0.0.1:{gateway.server_port}"}
    try:
        done = _maintenance(env, tmp_path)
        assert done.returncode == 0, done.stderr
        # A database that is not there: the pass fails before it starts.
        down = {**env, "SPECTRAL_DATABASE_URL": f"postgresql://x@127.0.0.1:{_free_port()}/x"}
        failed = _maintenance(down, tmp_path)
        assert failed.returncode != 0
    finally:
        gateway.shutdown()
    [(method, path, ok), (_, _, bad)] = _Pushgateway.pushes
    assert (method, path) == ("POST", "/metrics/job/spectral-maintenance")
    last_success = "spectral_maintenance_last_success_timestamp_seconds"
    assert (_pushed_sample(ok, last_success) or 0) > time.time() - 120
    assert _pushed_sample(ok, "spectral_maintenance_runs_total") == 1
    assert "process_" not in ok
    assert _pushed_sample(bad, last_success) is None
    assert 'spectral_maintenance_runs_total{outcome="failed"} 1.0' in bad
