"""`spectral topics plan|apply` against the real broker, and read-only commands that never
create a topic (a metadata request naming a missing topic creates it on a broker that
auto-creates topics, as the test broker does)."""

from __future__ import annotations

import json
import subprocess

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from spectral.kafka.topics import dlq_topic, topic_for
from tests.events import EVENTS
from tests.kafka_support import create_topics, partitions_of
from tests.support import eventually, spectral_in_process

pytestmark = pytest.mark.integration


def _spectral(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`spectral ARGS` (its entry point, in this process: :func:`spectral_in_process`)."""
    return spectral_in_process(env, *args)


async def _topics(bootstrap: str, prefix: str) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return {t for t in await admin.list_topics() if t.startswith(prefix)}
    finally:
        await admin.close()


async def _config(bootstrap: str, topic: str) -> dict[str, str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    finally:
        await admin.close()
    entries = responses[0].to_object()["resources"][0]["config_entries"]
    return {e["config_names"]: e["config_value"] for e in entries}


async def test_read_only_commands_create_no_topic(
    spectral_env: dict[str, str], kafka_bootstrap: str, topic_prefix: str
) -> None:
    for args in (
        ["dlq", "list", "--topic", f"{topic_prefix}nope"],
        ["dlq", "show", "--topic", f"{topic_prefix}nope", "--offset", "0"],
        ["replay", "rule-candidates", "--from-beginning", "--dry-run"],
        ["topics", "plan"],
    ):
        result = _spectral(spectral_env, *args)
        assert result.returncode in {0, 1}, result.stderr
    assert await _topics(kafka_bootstrap, topic_prefix) == set()


async def test_plan_then_apply_creates_every_topic_with_its_settings(
    spectral_env: dict[str, str], kafka_bootstrap: str, topic_prefix: str
) -> None:
    plan = _spectral(spectral_env, "topics", "plan", "--json", "--check")
    assert plan.returncode == 1  # changes pending
    planned = json.loads(plan.stdout)
    expected = {
        name
        for event_type in EVENTS.event_types()
        for name in (
            topic_for(event_type, topic_prefix),
            dlq_topic(topic_for(event_type, topic_prefix)),
        )
    }
    assert {c["topic"] for c in planned["changes"]} == expected
    assert await _topics(kafka_bootstrap, topic_prefix) == set()  # plan created nothing

    applied = _spectral(spectral_env, "topics", "apply")
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.index("+ ") < applied.stdout.index("applied")  # the plan first
    assert await _topics(kafka_bootstrap, topic_prefix) == expected
    source = topic_for(next(iter(EVENTS.event_types())), topic_prefix)
    config, dead = (
        await _config(kafka_bootstrap, source),
        await _config(kafka_bootstrap, dlq_topic(source)),
    )
    assert int(dead["max.message.bytes"]) > int(config["max.message.bytes"]) >= 1024 * 1024
    assert int(dead["retention.ms"]) > int(config["retention.ms"])
    # Segments roll within a day, so retention acts on a quiet topic too.
    assert int(config["segment.ms"]) <= 86_400_000
    assert int(dead["segment.ms"]) <= 86_400_000

    again = _spectral(spectral_env, "topics", "plan", "--check")
    assert again.returncode == 0, again.stdout
    assert "all as declared" in again.stdout


async def test_apply_never_shrinks_silently(
    spectral_env: dict[str, str], kafka_bootstrap: str, topic_prefix: str
) -> None:
    source = topic_for(EVENTS.event_types()[0], topic_prefix)
    await create_topics(kafka_bootstrap, [source], partitions=6)

    async def described() -> bool:  # a topic just created takes a moment to be described
        return len(await partitions_of(kafka_bootstrap, source)) == 6

    await eventually(described, timeout=15, interval=0.1)
    longer = {**spectral_env, "SPECTRAL_TOPIC_RETENTION_MS": str(10 * 86_400_000)}
    first = _spectral(longer, "topics", "apply")
    assert first.returncode == 0, first.stderr
    assert "Kafka cannot remove partitions" in first.stdout  # 6 kept, 3 declared
    await _retention_becomes(kafka_bootstrap, source, 10 * 86_400_000)
    # The default (7 days) is shorter than what the topic has now: refused without the flag.
    refused = _spectral(spectral_env, "topics", "apply")
    assert "--allow-shrink" in refused.stdout
    assert "applied" not in refused.stdout
    allowed = _spectral(spectral_env, "topics", "apply", "--allow-shrink")
    assert allowed.returncode == 0, allowed.stderr
    await _retention_becomes(kafka_bootstrap, source, 7 * 86_400_000)


async def _retention_becomes(bootstrap: str, topic: str, value: int) -> None:
    """Settings reach every broker through the metadata log: read until they have."""

    async def check() -> bool:
        return (await _config(bootstrap, topic))["retention.ms"] == str(value)

    await eventually(check, timeout=15)
