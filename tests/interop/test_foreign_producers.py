"""Producers in other languages, written from the published contract alone (schemas/events:
the spec, the JSON Schemas, the vectors), against the real consumer:

* Go (tests/interop/go): franz-go, zeebo/xxh3 and RFC 8785 code of its own; it checks the hash,
  key and timestamp vectors a producer needs;
* Java (tests/interop/java): kafka-clients, Jackson configured against its defaults that
  contradict the contract, networknt's JSON Schema validator over the published schemas, and
  OpenHFT's XXH3; it runs every vector of every file through a reader of its own, records
  included (every reason the spec lists).

Each checks itself against the vectors, publishes fresh failure-cluster snapshots with every
Kafka codec (the Java one also a record of almost 1 MiB per codec) and every record vector of
the topic as it is; the rule-candidates consumer applies every snapshot and dead-letters each
refused vector with the reason the vector declares. The topics are declared as `spectral topics
apply` declares them, and the producers use the settings section 5 of the spec asks for.

`make interop` builds both (outside any test's timeout); the tests only check the builds are
newer than their sources.
"""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from contracts import FAILURE_CLUSTER_DETECTED
from spectral.engine.handler import Outcome
from spectral.kafka.topics import dlq_topic, topic_for
from spectral.kafka.topology import TopicPolicy, declared_topics
from spectral.settings import Settings
from tests.integration.replay.support import rule_candidates, run_live
from tests.kafka_support import TRANSPORTS, create_topics, read_all, transport_params

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "schemas" / "events" / "vectors"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PER_CODEC = 12


@dataclass(frozen=True)
class Producer:
    name: str
    command: tuple[str, ...]
    artifact: Path
    sources: tuple[Path, ...]
    checks: Callable[[], int]
    """How many vectors its ``vectors`` command checks."""
    large_per_codec: int
    """Records of almost 1 MiB it publishes with each codec, beside PER_CODEC snapshots."""


def _load(name: str) -> Any:
    return json.loads((VECTORS / name).read_text("utf-8"))


def _records() -> list[dict[str, Any]]:
    loaded = _load("envelopes.json")
    records: list[dict[str, Any]] = loaded["records"] + loaded["sized_records"]
    return records


def _every_vector() -> int:
    """Every entry of every vector file."""
    files = ("snapshot_hash.json", "snapshot_hash_invalid.json", "timestamps.json")
    return sum(len(_load(name)) for name in files) + len(_records())


def _go_checks() -> int:
    """The hash vectors, the record vectors a producer's computation decides (valid, the hash
    and the two keys; the sized ones aside) and the valid timestamps."""
    producer_reasons = {"valid", "hash_mismatch", "key_mismatch", "record_key_mismatch"}
    records: list[dict[str, Any]] = _load("envelopes.json")["records"]
    stamps: list[dict[str, Any]] = _load("timestamps.json")
    hashes = len(_load("snapshot_hash.json"))
    return (
        hashes
        + sum(v["expect"] in producer_reasons for v in records)
        + sum(bool(v["valid"]) for v in stamps)
    )


GO_SOURCE = ROOT / "tests" / "interop" / "go"
JAVA_SOURCE = ROOT / "tests" / "interop" / "java"
GO = Producer(
    "go",
    (str(ROOT / "build" / "go" / "interop"),),
    ROOT / "build" / "go" / "interop",
    (*sorted(GO_SOURCE.glob("*.go")), GO_SOURCE / "go.mod", GO_SOURCE / "go.sum"),
    _go_checks,
    0,
)
JAVA = Producer(
    "java",
    # A run of seconds: the C1 compiler alone and the serial collector start it on far less CPU.
    (
        "java",
        "-XX:TieredStopAtLevel=1",
        "-XX:+UseSerialGC",
        "-jar",
        str(ROOT / "build" / "java" / "interop.jar"),
    ),
    ROOT / "build" / "java" / "interop.jar",
    (*sorted((JAVA_SOURCE / "src").rglob("*.java")), JAVA_SOURCE / "pom.xml"),
    _every_vector,
    1,
)
PRODUCERS = (GO, JAVA)


def built(producer: Producer) -> Producer:
    """``producer``, once its build (`make interop`) is known newer than each of its sources."""
    assert producer.artifact.exists(), f"{producer.artifact} is missing: run `make interop`"
    done = producer.artifact.stat().st_mtime
    stale = [str(s.relative_to(ROOT)) for s in producer.sources if s.stat().st_mtime > done]
    assert not stale, f"{producer.artifact} is older than {stale}: run `make interop`"
    return producer


@pytest.fixture(params=PRODUCERS, ids=[p.name for p in PRODUCERS])
def producer(request: pytest.FixtureRequest) -> Producer:
    return built(request.param)


def run(producer: Producer, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [*producer.command, *args], capture_output=True, text=True, timeout=300, check=False
    )
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_the_producer_agrees_with_the_vectors(producer: Producer) -> None:
    out = run(producer, "vectors", "--vectors", str(VECTORS)).stdout
    assert out.split()[:3] == [str(producer.checks()), "vectors", "agree"], out


@pytest.mark.parametrize("transport", transport_params("aiokafka"))
async def test_the_consumer_applies_everything_the_producer_publishes_with_every_codec(  # noqa: PLR0917 - fixtures
    producer: Producer,
    settings: Settings,
    kafka_bootstrap: str,
    database_url: str,
    tmp_path: Path,
    transport: str,
) -> None:
    """On each transport (confluent's in ``make test-slow``: librdkafka decodes the codecs
    itself)."""
    settings = settings.replace(**TRANSPORTS[transport])
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await _declare_topics(settings, kafka_bootstrap)
    manifest = tmp_path / "published.jsonl"
    brokers = ("--brokers", kafka_bootstrap, "--topic", topic)
    run(producer, "publish", *brokers, "--per-codec", str(PER_CODEC), "--manifest", str(manifest))
    run(producer, "publish-vectors", *brokers, "--vectors", str(VECTORS))
    published = [json.loads(line) for line in manifest.read_text().splitlines()]
    per_codec = PER_CODEC + producer.large_per_codec
    assert sorted(p["codec"] for p in published) == sorted(CODECS * per_codec)
    assert sum(p["bytes"] > 1_000_000 for p in published) == producer.large_per_codec * len(CODECS)

    summary = await run_live(settings, rule_candidates(settings)(database_url), idle=3.0)

    rows = await _stored(database_url, [p["cluster_id"] for p in published])
    assert {p["cluster_id"]: p["snapshot_hash"] for p in published} == rows
    on_topic = [v for v in _records() if v["topic_event_type"] == FAILURE_CLUSTER_DETECTED]
    vectors = {v["name"]: v for v in on_topic}
    assert {"tombstone_null_value", "record_key_not_utf8", "exactly_1_MiB"} <= set(vectors)
    refused = {name: v["expect"] for name, v in vectors.items() if v["expect"] != "valid"}
    dead = await read_all(kafka_bootstrap, dlq_topic(topic), timeout=30)
    assert {d.header("vector"): d.header("dlq.reason") for d in dead} == refused
    for letter in dead:  # the original key, byte for byte (not UTF-8 included)
        assert letter.key == _key(vectors[letter.header("vector") or ""])
    assert summary.counts[Outcome.DEAD_LETTERED] == len(refused)
    assert summary.counts[Outcome.APPLIED] >= len(published) + 1


async def test_the_java_client_s_default_request_limit_refuses_a_valid_record(
    settings: Settings, kafka_bootstrap: str
) -> None:
    """Why section 5 asks producers to raise their request limit: a record whose value is exactly
    1 MiB (valid, and the topic takes it) is refused by the Java client's default
    max.request.size before it is sent."""
    await _declare_topics(settings, kafka_bootstrap)
    done = run(
        built(JAVA),
        "publish-vectors",
        "--brokers",
        kafka_bootstrap,
        "--topic",
        topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix),
        "--vectors",
        str(VECTORS),
        "--only",
        "exactly_1_MiB",
        "--max-request-size",
        str(1024 * 1024),
        check=False,
    )
    assert done.returncode == 1
    assert "exactly_1_MiB: RecordTooLargeException" in done.stderr


async def _declare_topics(settings: Settings, bootstrap: str) -> None:
    """The topic and its dead-letter topic, as `spectral topics apply` declares them."""
    prefix = settings.topic_prefix
    for topic in declared_topics([FAILURE_CLUSTER_DETECTED], prefix, TopicPolicy(), 1):
        await create_topics(bootstrap, [topic.name], topic.partitions, dict(topic.config))


def _key(vector: dict[str, Any]) -> bytes | None:
    if "key_base64" in vector:
        return base64.b64decode(vector["key_base64"])
    key: str | None = vector["key"]
    return None if key is None else key.encode()


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
