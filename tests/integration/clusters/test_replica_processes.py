"""Three `spectral clusters tick --every` processes and a relay, as deployed: one snapshot per
changed cluster, one model call per (cluster, content), metrics reachable, SIGTERM exits 0."""

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
    processes = [*tickers, relay]
    try:
        async with service(database_url) as svc:
            await svc.ingest([failure(f"a-{i}", rule_n=i % clusters) for i in range(48)])

            async def published(n: int) -> bool:
                rows = await fetch(
                    database_url,
                    "SELECT count(*) FILTER (WHERE published_at IS NOT NULL) AS p, count(*) AS n "
                    "FROM core.outbox",
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
        assert "spectral_clusters_stub_leases_total" in tick_metrics
        assert "spectral_clusters_snapshots_published_total" in tick_metrics
        assert "spectral_outbox_depth 0.0" in relay_metrics
        assert "spectral_outbox_oldest_age_seconds" in relay_metrics

        for proc in processes:
            proc.send_signal(signal.SIGTERM)
        assert [await wait_exit(p) for p in processes] == [0, 0, 0, 0]
    finally:
        for proc in processes:
            if proc.poll() is None:
                proc.kill()

    events = await outbox_events(database_url)
    assert len(events) == clusters + 5
    assert all(e.payload.suggested_rule_stub for _, e in events)
    usage = await fetch(database_url, "SELECT count(*) AS n FROM clusters.model_usage")
    leases = await fetch(database_url, "SELECT generation_mode FROM clusters.rule_stub_leases")
    assert usage[0]["n"] == clusters + 5  # one paid call per (cluster, content)
    assert [r["generation_mode"] for r in leases] == ["llm"] * (clusters + 5)
