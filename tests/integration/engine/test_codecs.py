"""Every Kafka compression codec is decoded — batches produced by aiokafka and by Kafka's own
Java client with gzip, snappy, lz4 and zstd — and a batch the client truly cannot read makes
`spectral consume` exit non-zero with a clear message instead of retrying silently forever."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from prometheus_client import CollectorRegistry

from contracts import FAILURE_CLUSTER_DETECTED
from spectral.devstack.kafka import KAFKA_VERSION
from spectral.devstack.kafka_jars import default_cache_dir, find_java, maven_jars
from spectral.engine.engine import ConsumerEngine, EngineOptions
from spectral.engine.handler import Outcome
from spectral.kafka.topics import dlq_topic, topic_for
from spectral.settings import Settings
from tests.events import encode
from tests.integration.engine.test_hostile_records import KeysHandler
from tests.kafka_support import TRANSPORTS, cluster_event, create_topics, read_all

pytestmark = pytest.mark.integration

CODECS = ("gzip", "snappy", "lz4", "zstd")
JAVA_PRODUCER = Path(__file__).with_name("java") / "CompressedProducer.java"
PER_CODEC = 20


async def _aiokafka(bootstrap: str, topic: str, codec: str) -> list[str]:
    events = [cluster_event() for _ in range(PER_CODEC)]
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, compression_type=codec, linger_ms=50, acks="all"
    )
    await producer.start()
    try:
        futures = [
            await producer.send(topic, value=encode(e), key=str(e.payload.cluster_id).encode())
            for e in events
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return [e.idempotency_key for e in events]


def _java(bootstrap: str, topic: str, codecs: tuple[str, ...], tmp_path: Path) -> list[str]:
    """The same through Kafka's Java client (not spectral's, not Python): one JVM, a producer
    of its own per codec."""
    files: list[str] = []
    keys: list[str] = []
    for codec in codecs:
        events = [cluster_event() for _ in range(PER_CODEC)]
        lines = tmp_path / f"{codec}.tsv"
        lines.write_text(
            "".join(f"{e.payload.cluster_id}\t{encode(e).decode()}\n" for e in events),
            encoding="utf-8",
        )
        files += [codec, str(lines)]
        keys += [e.idempotency_key for e in events]
    libs = maven_jars(default_cache_dir(), KAFKA_VERSION).libs_dir
    result = subprocess.run(
        [
            find_java(KAFKA_VERSION),
            # It runs for seconds: the C1 compiler alone and the serial collector start it (and
            # compile the source) on far less CPU.
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            "-cp",
            f"{libs}/*",
            str(JAVA_PRODUCER),
            bootstrap,
            topic,
            *files,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return keys


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
async def test_batches_of_every_codec_from_two_clients_are_applied(
    settings: Settings,
    kafka_bootstrap: str,
    tmp_path: Path,
    transport: str,
) -> None:
    settings = settings.replace(**TRANSPORTS[transport])
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await create_topics(kafka_bootstrap, [topic, dlq_topic(topic)], partitions=2)
    expected: list[str] = []
    for codec in CODECS:
        expected += await _aiokafka(kafka_bootstrap, topic, codec)
    expected += await asyncio.to_thread(_java, kafka_bootstrap, topic, CODECS, tmp_path)

    handler = KeysHandler()
    assert settings.database_url is not None
    summary = await ConsumerEngine(
        handler,
        settings,
        kafka_bootstrap=kafka_bootstrap,
        database_url=settings.database_url.get_secret_value(),
        options=EngineOptions(stop_when_idle=3.0),
        registry=CollectorRegistry(),
    ).run()

    assert summary.counts[Outcome.APPLIED] == len(expected) == 8 * PER_CODEC
    assert summary.counts[Outcome.DEAD_LETTERED] == 0
    assert sorted(handler.keys) == sorted(expected)
    assert await read_all(kafka_bootstrap, dlq_topic(topic)) == []


# `spectral consume` as a process whose aiokafka has lost the zstd codec library.
WITHOUT_ZSTD = """
import sys
import aiokafka.codec
aiokafka.codec.has_zstd = lambda: False
at_fetch = sys.argv.pop(1) == "--at-fetch"
if at_fetch:  # skip the start-up check: reach the unreadable batch itself
    import spectral.kafka.codecs
    spectral.kafka.codecs.missing_codecs = lambda: []
from spectral.cli import main
sys.argv[0] = "spectral"
main()
"""


def _consume_without_zstd(env: dict[str, str], *first: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            WITHOUT_ZSTD,
            *first,
            "consume",
            "rule-candidates",
            "--stop-when-idle",
            "20",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def test_a_batch_the_client_cannot_read_fails_loudly(
    settings: Settings, kafka_bootstrap: str, spectral_env: dict[str, str]
) -> None:
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await create_topics(kafka_bootstrap, [topic, dlq_topic(topic)])
    await _aiokafka(kafka_bootstrap, topic, "zstd")

    refused = await asyncio.to_thread(_consume_without_zstd, spectral_env, "--at-start")
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "compression codecs zstd cannot be decoded" in refused.stderr

    failed = await asyncio.to_thread(_consume_without_zstd, spectral_env, "--at-fetch")
    assert failed.returncode == 1, failed.stderr[-2000:]
    assert "records this client cannot read (UnsupportedCodecError" in failed.stderr
    assert f"{topic}:0" in failed.stderr
