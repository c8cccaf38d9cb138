"""Three `spectral clusters tick --every` processes, a relay and a work executor, as deployed:
one snapshot per changed cluster (with its stub), one paid call per (cluster, content), metrics
reachable, SIGTERM exits 0."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from spectral.devstack.ports import free_port
from tests.integration.clusters.support import failure, fetch, outbox_events, service
from tests.support import eventually

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
SPECTRAL = str(Path(sys.executable).with_name("spectral"))


def start(env: dict[str, str], log: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [SPECTRAL, *args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log.open("ab")
    )


async def wait_exit(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> int:
    loop = asyncio.get_running_loop()
    return await asyncio.wait_for(loop.run_in_executor(None, proc.wait), timeout)


async def test_three_tick_processes_and_a_relay(
    spectral_env: dict[str, str], database_url: str, tmp_path: Path
) -> None:
    clusters = 12
    ports = [free_port() for _ in range(4)]
    tickers = [
        start(
            spectral_env,
            tmp_path / f"tick{i}.log",
            "clusters",
            "tick",
            "--every",
            "0.2",
            "--metrics-port",
            str(ports[i]),
        )
        for i in range(3)
    ]
    relay = start(
        spectral_env, tmp_path / "relay.log", "outbox", "relay", "--metrics-port", str(ports[3])
    )
    executor_env = {**spectral_env, "SPECTRAL_WORK_JOURNAL_DIR": str(tmp_path / "journal")}
    executor = start(executor_env, tmp_path / "executor.log", "consume", "work-executor")
    processes = [*tickers, relay, executor]
    try:
        async with service(database_url) as svc:
            await svc.ingest([failure(f"a-{i}", rule_n=i % clusters) for i in range(48)])

            async def published(n: int) -> bool:
                rows = await fetch(
                    database_url,
                    "SELECT count(*) FILTER (WHERE published_at IS NOT NULL) AS p, count(*) AS n "
                    "FROM core.outbox WHERE event_type = 'platform.failure_cluster.detected'",
                )
                return bool(rows[0]["p"] == rows[0]["n"] == n)

            await eventually(lambda: published(clusters), timeout=60)
            await svc.ingest([failure(f"b-{i}", rule_n=i, minutes=9) for i in range(5)])
            await eventually(lambda: published(clusters + 5), timeout=60)
            await asyncio.sleep(1.0)  # a few more ticks: nothing new may appear
            assert await published(clusters + 5)

        async with httpx.AsyncClient() as client:
            tick_metrics = (await client.get(f"http://127.0.0.1:{ports[0]}/metrics")).text
            relay_metrics = (await client.get(f"http://127.0.0.1:{ports[3]}/metrics")).text
        assert 'spectral_clusters_stubs_total{event="asked"}' in tick_metrics
        assert "spectral_clusters_snapshots_published_total" in tick_metrics
        assert "spectral_outbox_depth 0.0" in relay_metrics
        assert "spectral_outbox_oldest_age_seconds" in relay_metrics

        for proc in processes:
            proc.send_signal(signal.SIGTERM)
        assert [await wait_exit(p) for p in processes] == [0, 0, 0, 0, 0]
    finally:
        for proc in processes:
            if proc.poll() is None:
                proc.kill()

    events = await outbox_events(database_url)
    assert len(events) == clusters + 5
    assert all(e.payload.suggested_rule_stub for _, e in events)
    paid = await fetch(
        database_url,
        "SELECT w.status, w.attempt, (SELECT count(*) FROM work.ledger_entries e "
        "  WHERE e.work_item_id = w.work_item_id AND e.entry_type = 'prompt') AS calls "
        "FROM work.work_items w WHERE w.function_key = 'rule_stub'",
    )
    # one paid call per (cluster, content)
    assert [(r["status"], r["attempt"], r["calls"]) for r in paid] == [("applied", 1, 1)] * (
        clusters + 5
    )
