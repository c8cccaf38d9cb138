"""End to end, as an operator would run it: `clusters ingest` -> `clusters tick` -> `outbox
relay` -> Kafka -> `consume rule-candidates` -> `triage list`. Every step is the real CLI in a
subprocess against the test's own database, broker and topic prefix."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from producers.clusters.demo import SAMPLE_FILE, demo_data
from tests.integration.clusters.support import fetch

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
SPECTRAL = str(Path(sys.executable).with_name("spectral"))


def spectral(env: dict[str, str], *args: str, stdin: bytes | None = None) -> str:
    done = subprocess.run(
        [SPECTRAL, *args],
        cwd=ROOT,
        env=env,
        input=stdin,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"spectral {' '.join(args)}: {done.stderr.decode()[-2000:]}"
    return done.stdout.decode()


def fields(line: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in line.split())


def inbox(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    rows = json.loads(spectral(env, "triage", "list", "--json", "--limit", "1000"))
    return {row["cluster_id"]: row for row in rows}


async def test_failures_in_triage_inbox_out(
    spectral_env: dict[str, str], database_url: str
) -> None:
    env = spectral_env
    keys = {(f.workspace_id, f.rule_id, f.grouping_signature) for f in demo_data()}

    first = fields(spectral(env, "clusters", "ingest", str(SAMPLE_FILE)).strip())
    assert first == {
        "received": "120",
        "inserted": "120",
        "duplicates": "0",
        "invalid": "0",
        "clusters_detected": str(len(keys)),
    }
    again = fields(spectral(env, "clusters", "ingest", "-", stdin=SAMPLE_FILE.read_bytes()))
    assert (again["inserted"], again["duplicates"]) == ("0", "120")

    tick = fields(spectral(env, "clusters", "tick", "--stub-wait", "0"))
    assert (tick["published"], tick["stubs_asked"]) == (str(len(keys)), str(len(keys)))
    spectral(env, "outbox", "relay", "--once")
    spectral(env, "consume", "rule-candidates", "--stop-when-idle", "3")

    listed = inbox(env)
    producer = {
        str(r["cluster_id"]): r
        for r in await fetch(database_url, "SELECT * FROM clusters.clusters")
    }
    assert set(listed) == set(producer)
    by_cluster: dict[str, int] = {
        r["c"]: r["n"]
        for r in await fetch(
            database_url,
            "SELECT cluster_id::text AS c, count(*) AS n FROM clusters.failures GROUP BY 1",
        )
    }
    projected = {
        str(r["cluster_id"]): r["snapshot_hash"]
        for r in await fetch(database_url, "SELECT * FROM platform.rule_candidates_pending")
    }
    for cluster_id, row in listed.items():
        assert row["failure_count"] == by_cluster[cluster_id]
        assert row["status"] == "pending"
        assert projected[cluster_id] == producer[cluster_id]["published_hash"]
    assert sum(row["failure_count"] for row in listed.values()) == 120

    # A restart of every process and more failures: same cluster ids, updated in place.
    more = [
        orjson.dumps(f.model_dump(mode="json") | {"failure_id": f"late-{f.failure_id}"})
        for f in demo_data(30, seed=99)
    ]
    spectral(env, "clusters", "ingest", "-", stdin=b"\n".join(more))
    spectral(env, "clusters", "tick", "--stub-wait", "0")
    spectral(env, "outbox", "relay", "--once")
    spectral(env, "consume", "rule-candidates", "--stop-when-idle", "3")
    after = inbox(env)
    assert set(after) >= set(listed)
    assert sum(row["failure_count"] for row in after.values()) == 150
    grown = [c for c in listed if after[c]["failure_count"] > listed[c]["failure_count"]]
    assert grown
