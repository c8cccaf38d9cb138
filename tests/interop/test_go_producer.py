"""A producer in another language, written from the published contract alone, against the real
consumer: a Go program (franz-go, zeebo/xxh3, its own RFC 8785 code in tests/interop/go) checks
itself against the vectors, publishes fresh failure-cluster snapshots with every Kafka codec and
every record vector as it is; the rule-candidates consumer applies every snapshot and refuses
each refused vector with the reason the vector declares.

The Go build is cached in the ignored build/go folder (modules from the Go module proxy, pinned
by go.sum): a first build fetches and compiles franz-go (about a minute on two cores), later
runs reuse it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from consumers.rule_candidates.deployment import build
from contracts import FAILURE_CLUSTER_DETECTED
from spectral.engine.engine import ConsumerEngine, EngineOptions
from spectral.engine.handler import Outcome
from spectral.kafka.topics import dlq_topic, topic_for
from spectral.settings import Settings
from tests.kafka_support import create_topics, read_all

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tests" / "interop" / "go"
CACHE = ROOT / "build" / "go"
BINARY = CACHE / "interop"
VECTORS = ROOT / "schemas" / "events" / "vectors"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PER_CODEC = 12


def go_env() -> dict[str, str]:
    return {
        **os.environ,
        "GOCACHE": str(CACHE / "cache"),
        "GOMODCACHE": str(CACHE / "mod"),
        "GOFLAGS": "-modcacherw -mod=readonly",
        "GOTOOLCHAIN": "local",
    }


@pytest.fixture(scope="module")
def interop() -> Path:
    """The Go producer, built (or rebuilt when its source changed) into build/go."""
    go = shutil.which("go") or (
        "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None
    )
    assert go is not None, (
        "the Go toolchain is needed for this test (https://go.dev/dl, or apt-get install golang)"
    )
    done = subprocess.run(
        [go, "build", "-o", str(BINARY), "."],
        cwd=SOURCE,
        env=go_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"go build failed:\n{done.stdout}{done.stderr}"
    return BINARY


def run(binary: Path, *args: str) -> str:
    done = subprocess.run(
        [str(binary), *args], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_go_producer_agrees_with_every_vector(interop: Path) -> None:
    out = run(interop, "vectors", "-dir", str(VECTORS))
    assert int(out.split()[0]) > 50, out  # hash, record and timestamp vectors, all checked


async def test_the_consumer_applies_everything_the_go_producer_publishes_with_every_codec(
    interop: Path, settings: Settings, kafka_bootstrap: str, database_url: str, tmp_path: Path
) -> None:
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await create_topics(
        kafka_bootstrap,
        [topic, dlq_topic(topic)],
        partitions=3,
        configs={"max.message.bytes": str(4 * 1024 * 1024)},
    )
    manifest = tmp_path / "published.jsonl"
    run(
        interop,
        "publish",
        "-brokers",
        kafka_bootstrap,
        "-topic",
        topic,
        "-per-codec",
        str(PER_CODEC),
        "-manifest",
        str(manifest),
    )
    run(
        interop,
        "publish-vectors",
        "-brokers",
        kafka_bootstrap,
        "-topic",
        topic,
        "-dir",
        str(VECTORS),
    )
    published = [json.loads(line) for line in manifest.read_text().splitlines()]
    assert sorted({p["codec"] for p in published}) == sorted(CODECS)
    assert len(published) == PER_CODEC * len(CODECS)

    summary = await _consume(settings)

    rows = await _stored(database_url, [p["cluster_id"] for p in published])
    assert {p["cluster_id"]: p["snapshot_hash"] for p in published} == rows
    vectors = _record_vectors()
    refused = {name: v["expect"] for name, v in vectors.items() if v["expect"] != "valid"}
    dead = await read_all(kafka_bootstrap, dlq_topic(topic), timeout=30)
    dead_reasons = {d.header("vector"): d.header("dlq.reason") for d in dead}
    assert dead_reasons == refused  # the Go snapshots and every valid vector applied
    assert summary.counts[Outcome.DEAD_LETTERED] == len(refused)
    assert summary.counts[Outcome.APPLIED] >= len(published) + 1


def _record_vectors() -> dict[str, dict[str, Any]]:
    loaded = json.loads((VECTORS / "envelopes.json").read_text("utf-8"))
    every = loaded["records"] + loaded["sized_records"]
    return {v["name"]: v for v in every if v["topic_event_type"] == FAILURE_CLUSTER_DETECTED}


async def _consume(settings: Settings) -> Any:
    assert settings.kafka_bootstrap is not None
    assert settings.database_url is not None
    url = settings.database_url.get_secret_value()
    engine = ConsumerEngine(
        build(settings, url, CollectorRegistry()),
        settings,
        kafka_bootstrap=settings.kafka_bootstrap,
        database_url=url,
        options=EngineOptions(stop_when_idle=3.0, max_batch=500),
        registry=CollectorRegistry(),
    )
    return await engine.run()


async def _stored(database_url: str, clusters: list[str]) -> dict[str, str]:
    conn = await asyncpg.connect(database_url)
    try:
        records = await conn.fetch(
            "SELECT cluster_id::text AS id, snapshot_hash FROM platform.rule_candidates_pending "
            "WHERE cluster_id = ANY($1::uuid[])",
            clusters,
        )
    finally:
        await conn.close()
    return {r["id"]: r["snapshot_hash"] for r in records}
