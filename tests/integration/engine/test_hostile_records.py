"""Whatever a record's key, headers, size or bytes, the partition keeps flowing and nothing is
lost: every record ends applied or dead-lettered — on T.dlq, as a reference when the full dead
letter is too large for it, or in core.dead_letters when the broker refuses even the reference.
Real broker, real database."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from contracts import FAILURE_CLUSTER_DETECTED
from spectral.engine.engine import ConsumerEngine, EngineOptions, RunSummary
from spectral.engine.handler import Delivery, Handler, HandlerResult, Outcome
from spectral.kafka.topics import dlq_topic, topic_for
from spectral.settings import Settings
from tests.events import encode, record_key
from tests.integration.engine.hostile import (
    MIB,
    Hostile,
    corpus,
    dead_letters_of,
    publish_hostile,
)
from tests.integration.replay.support import spectral_json, spectral_ok
from tests.kafka_support import (
    TRANSPORTS,
    cluster_event,
    committed_offsets,
    create_topics,
    end_offsets,
)

pytestmark = pytest.mark.integration

BIG = {"max.message.bytes": str(10 * MIB)}


class KeysHandler(Handler[None]):
    name = "hostile-test"
    event_types = (FAILURE_CLUSTER_DETECTED,)

    def __init__(self) -> None:
        self.keys: list[str] = []

    async def apply(
        self, conn: asyncpg.Connection, deliveries: Sequence[Delivery]
    ) -> HandlerResult[None]:
        await conn.execute("SELECT 1")
        self.keys.extend(d.idempotency_key for d in deliveries)
        return HandlerResult()


async def _run(settings: Settings, handler: KeysHandler, registry: CollectorRegistry) -> RunSummary:
    assert settings.kafka_bootstrap is not None
    assert settings.database_url is not None
    return await ConsumerEngine(
        handler,
        settings,
        kafka_bootstrap=settings.kafka_bootstrap,
        database_url=settings.database_url.get_secret_value(),
        options=EngineOptions(stop_when_idle=3.0, max_batch=50),
        registry=registry,
    ).run()


def _fallbacks(registry: CollectorRegistry, kind: str) -> float:
    value = registry.get_sample_value(
        "spectral_consumer_dead_letter_fallbacks_total",
        {"consumer": "hostile-test", "fallback": kind},
    )
    return value or 0.0


async def _accounted(
    settings: Settings,
    topic: str,
    records: Sequence[Hostile],
    offsets: Sequence[int],
    handler: KeysHandler,
) -> None:
    """Every record applied or dead-lettered (topic or table); offsets at the end."""
    assert settings.kafka_bootstrap is not None
    assert settings.database_url is not None
    kafka_bootstrap = settings.kafka_bootstrap
    database_url = settings.database_url.get_secret_value()
    dead = await dead_letters_of(kafka_bootstrap, database_url, topic)
    applied = set(handler.keys)
    for record, offset in zip(records, offsets, strict=True):
        on_topic = dead.dead_on_topic.get(offset)
        in_table = offset in dead.dead_in_table
        if record.valid and record.key is not None and record.label.startswith("h"):
            assert not on_topic, f"{record.label} is valid and was dead-lettered"
        if not record.valid:
            assert on_topic or in_table, f"{record.label} at {offset} was lost"
        if on_topic is None and not in_table:
            assert record.valid, record.label
    assert len(applied) == sum(
        1
        for r, o in zip(records, offsets, strict=True)
        if r.valid and o not in dead.dead_on_topic and o not in dead.dead_in_table
    )
    group = settings.topic_prefix + "hostile-test"
    assert await committed_offsets(kafka_bootstrap, group, topic) == await end_offsets(
        kafka_bootstrap, topic
    )


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
async def test_any_key_headers_or_size_keeps_the_partition_flowing(
    settings: Settings,
    kafka_bootstrap: str,
    database_url: str,
    transport: str,
) -> None:
    settings = settings.replace(**TRANSPORTS[transport])
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    # The dead-letter topic keeps the broker's default record limit (1 MiB): smaller than its
    # source, so the large records' dead letters are refused whole and go as references.
    await create_topics(kafka_bootstrap, [topic], configs=BIG)
    await create_topics(kafka_bootstrap, [dlq_topic(topic)])
    last = cluster_event()
    records = [*corpus(), Hostile(record_key(last), encode(last), (), valid=True, label="h-last")]
    offsets = await publish_hostile(kafka_bootstrap, topic, records)

    registry = CollectorRegistry()
    handler = KeysHandler()
    summary = await _run(settings, handler, registry)

    assert summary.records == len(records)
    await _accounted(settings, topic, records, offsets, handler)
    dead = await dead_letters_of(kafka_bootstrap, database_url, topic)
    for label in ("big-value", "mostly-headers"):
        offset = offsets[[r.label for r in records].index(label)]
        reference = dead.dead_on_topic[offset]
        assert reference.value == b""
        assert "left at its source offset" in (reference.header("dlq.detail") or "")
    assert _fallbacks(registry, "reference") >= 2
    assert _fallbacks(registry, "table") == 0


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
async def test_what_the_broker_refuses_even_as_a_reference_is_kept_in_the_database(
    settings: Settings,
    kafka_bootstrap: str,
    database_url: str,
    spectral_env: dict[str, str],
    transport: str,
) -> None:
    settings = settings.replace(**TRANSPORTS[transport])
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await create_topics(kafka_bootstrap, [topic], configs=BIG)
    # A dead-letter topic too small for any dead letter (a deployment mistake).
    await create_topics(kafka_bootstrap, [dlq_topic(topic)], configs={"max.message.bytes": "64"})
    first, second = cluster_event(), cluster_event()
    records = [
        Hostile(b"a", b"{not json", (("dlq.history", b"null"),), valid=False, label="p1"),
        Hostile(record_key(first), encode(first), (), valid=True, label="h1"),
        Hostile(None, b"\x00\xff" * 1000, (("x", None),), valid=False, label="p2"),
        Hostile(record_key(second), encode(second), (), valid=True, label="h2"),
    ]
    offsets = await publish_hostile(kafka_bootstrap, topic, records)

    registry = CollectorRegistry()
    handler = KeysHandler()
    summary = await _run(settings, handler, registry)

    assert summary.counts[Outcome.APPLIED] == 2
    assert summary.counts[Outcome.DEAD_LETTERED] == 2
    assert _fallbacks(registry, "table") == 2
    await _accounted(settings, topic, records, offsets, handler)
    dead = await dead_letters_of(kafka_bootstrap, database_url, topic)
    row = dead.dead_in_table[offsets[2]]
    assert row["value_head"] == records[2].value  # as much as fits: all of it here
    assert row["reason"] == "not_json"
    assert any(
        name in row["refusal"]
        for name in ("MessageSizeTooLarge", "RecordTooLarge", "MSG_SIZE_TOO_LARGE")  # the clients
    )

    # The dead-letter tools show them.
    listed = await asyncio.to_thread(
        spectral_json, spectral_env, "dlq", "list", "--topic", topic, "--json"
    )
    assert [(r["in"], r["source"]) for r in listed] == [
        ("core.dead_letters", f"{topic}:0:{offsets[0]}"),
        ("core.dead_letters", f"{topic}:0:{offsets[2]}"),
    ]
    shown = await asyncio.to_thread(
        spectral_json,
        spectral_env,
        "dlq",
        "show",
        "--topic",
        topic,
        "--stored",
        str(listed[1]["id"]),
        "--json",
    )
    assert shown["undecodable"].startswith("not_json")
    assert shown["headers"] == {"x": ""}
    text = await asyncio.to_thread(spectral_ok, spectral_env, "dlq", "list", "--topic", topic)
    assert "refused by the broker even as a reference" in text
