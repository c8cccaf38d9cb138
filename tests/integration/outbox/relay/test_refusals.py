"""A record the broker refuses for good is no broker outage: the relay keeps its session and
readiness, the other keys keep flowing, the refused row's key waits (never skipped), and the
row goes out once the topic takes it."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

import asyncpg
import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from prometheus_client import CollectorRegistry

from contracts import WORK_ITEM_ENQUEUED, WorkItemEnqueuedPayload, work_item_enqueued_event
from spectral.observability.health import Health
from spectral.outbox.relay import OutboxRelay, RelayMetrics, RelayOptions
from spectral.outbox.writer import OutboxItem, enqueue
from spectral.retry import Backoff
from spectral.settings import Settings
from tests.integration.outbox.relay.support import (
    EVENT_TYPE,
    T0,
    Received,
    by_key,
    enqueue_numbered,
    key_id,
    numbered,
    outbox_counts,
    read_topic,
)
from tests.kafka_support import PRODUCING, TRANSPORTS, create_topics, read_all
from tests.support import eventually

pytestmark = pytest.mark.integration

SMALL = "200"
"""max.message.bytes of the work topic while it refuses: smaller than any record."""
DEFAULT_LIMIT = "1048588"

POISON = key_id(99)


def _poison_seqs(records: list[Received]) -> list[int]:
    return by_key(records).get(str(POISON), [])


def _sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def _set_limit(bootstrap: str, topic: str, limit: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, {"max.message.bytes": limit})]
        )
    finally:
        await admin.close()


async def _enqueue_poison_then_more(database_url: str) -> None:
    """Key POISON: a work item the work topic refuses, then a snapshot that must wait behind
    it; twelve other keys with three snapshots each."""
    work = work_item_enqueued_event(
        WorkItemEnqueuedPayload(
            work_item_id=UUID(int=7),
            thread_id=UUID(int=8),
            sequence=0,
            attempt=1,
            lock_scope="project:p",
            not_before=T0,
            kind="story_generate_epic",
            target_ref="doc#E1",
            input={},
        ),
        occurred_at=T0,
    )
    conn = await asyncpg.connect(database_url)
    try:
        async with conn.transaction():
            await enqueue(
                conn,
                [OutboxItem(work, str(POISON)), OutboxItem(numbered(POISON, 1), str(POISON))],
            )
    finally:
        await conn.close()
    await enqueue_numbered(database_url, [(key_id(k), s) for s in range(1, 4) for k in range(12)])


async def _refusing_relay(
    settings: Settings,
    kafka_bootstrap: str,
    topic_prefix: str,
    registry: CollectorRegistry,
    *,
    health: Health | None = None,
    **options: Any,
) -> tuple[OutboxRelay, str]:
    """A relay (polling every 50 ms, trying a refused key again after 0.2-1 s) over the outbox
    of :func:`_enqueue_poison_then_more`, with a work topic that refuses the poison; and that
    topic."""
    work_topic = topic_prefix + WORK_ITEM_ENQUEUED
    await create_topics(kafka_bootstrap, [work_topic], 1, {"max.message.bytes": SMALL})
    await create_topics(kafka_bootstrap, [topic_prefix + EVENT_TYPE], 4)
    assert settings.kafka_bootstrap is not None
    assert settings.database_url is not None
    database_url = settings.database_url.get_secret_value()
    await _enqueue_poison_then_more(database_url)
    relay = OutboxRelay(
        settings,
        kafka_bootstrap=settings.kafka_bootstrap,
        database_url=database_url,
        metrics=RelayMetrics(registry),
        options=RelayOptions(
            poll_interval=0.05, refusal_backoff=Backoff(base=0.2, cap=1.0), **options
        ),
        health=health,
    )
    return relay, work_topic


@pytest.mark.parametrize("transport", PRODUCING)
async def test_a_refused_record_holds_back_its_key_only_and_goes_out_once_the_topic_takes_it(
    settings: Settings, database_url: str, kafka_bootstrap: str, topic_prefix: str, transport: str
) -> None:
    registry = CollectorRegistry()
    health = Health()
    relay, work_topic = await _refusing_relay(
        settings.replace(**TRANSPORTS[transport]),
        kafka_bootstrap,
        topic_prefix,
        registry,
        health=health,
    )
    run = asyncio.create_task(relay.run())
    try:

        async def others_published() -> bool:
            seqs = by_key(await read_topic(kafka_bootstrap, topic_prefix + EVENT_TYPE))
            return all(seqs.get(str(key_id(k))) == [1, 2, 3] for k in range(12))

        await eventually(others_published, timeout=60)

        async def refused_again() -> bool:
            return (
                _sample(registry, "spectral_outbox_relay_refused_total", reason="message_too_large")
                >= 3
            )

        await eventually(refused_again, timeout=30)
        # The broker answers: no outage, no new session, the relay stays ready.
        assert _sample(registry, "spectral_outbox_relay_errors_total", component="kafka") == 0
        assert _sample(registry, "spectral_outbox_relay_errors_total", component="database") == 0
        assert relay._report.sessions == 1
        checks = health.ready()[1]["checks"]
        assert checks["session"]["ok"] is True, checks
        assert checks["shards"]["ok"] is True, checks
        # The refused row waits, unmarked. Its follower went out with the batch that met the
        # refusal (sent at once, before any answer), once: never again at a try.
        assert await read_all(kafka_bootstrap, work_topic, timeout=2) == []
        assert _poison_seqs(await read_topic(kafka_bootstrap, topic_prefix + EVENT_TYPE)) == [1]
        # A row of the key written now waits behind the refused one, try after try.
        await enqueue_numbered(database_url, [(POISON, 2)])
        tries = _sample(registry, "spectral_outbox_relay_refused_total", reason="message_too_large")

        async def tried_twice_more() -> bool:
            now = _sample(
                registry, "spectral_outbox_relay_refused_total", reason="message_too_large"
            )
            return now >= tries + 2

        await eventually(tried_twice_more, timeout=30)
        assert _poison_seqs(await read_topic(kafka_bootstrap, topic_prefix + EVENT_TYPE)) == [1]
        assert _sample(registry, "spectral_outbox_relay_keys_held_back") == 1

        await _set_limit(kafka_bootstrap, work_topic, DEFAULT_LIMIT)

        async def key_published() -> bool:
            seqs = _poison_seqs(await read_topic(kafka_bootstrap, topic_prefix + EVENT_TYPE))
            return seqs[-1:] == [2]

        await eventually(key_published, timeout=30)
        [record] = await read_all(kafka_bootstrap, work_topic, timeout=10)
        assert record.key == str(POISON).encode()
        # The follower was unmarked: published again (consumers deduplicate), then the new row.
        assert _poison_seqs(await read_topic(kafka_bootstrap, topic_prefix + EVENT_TYPE)) == [
            1,
            1,
            2,
        ]
        assert _sample(registry, "spectral_outbox_relay_keys_held_back") == 0
        assert await outbox_counts(database_url) == (39, 0)
    finally:
        relay.stop()
        await asyncio.wait_for(run, timeout=30)


@pytest.mark.parametrize("transport", PRODUCING)
async def test_a_one_shot_run_reports_the_refused_rows_and_publishes_the_rest(
    settings: Settings, database_url: str, kafka_bootstrap: str, topic_prefix: str, transport: str
) -> None:
    settings = settings.replace(**TRANSPORTS[transport])
    await create_topics(
        kafka_bootstrap, [topic_prefix + WORK_ITEM_ENQUEUED], 1, {"max.message.bytes": SMALL}
    )
    await _enqueue_poison_then_more(database_url)
    assert settings.kafka_bootstrap is not None
    assert settings.database_url is not None
    report = await OutboxRelay(
        settings,
        kafka_bootstrap=settings.kafka_bootstrap,
        database_url=settings.database_url.get_secret_value(),
        metrics=RelayMetrics(CollectorRegistry()),
        options=RelayOptions(once=True),
    ).run()
    assert report.refused == 1
    assert report.published == 36  # the refused row and its follower stay unmarked
    assert await outbox_counts(database_url) == (38, 2)


@pytest.mark.parametrize("transport", PRODUCING)
async def test_a_refusal_holds_back_its_keys_rows_in_the_batch_read_while_it_was_in_flight(
    settings: Settings, database_url: str, kafka_bootstrap: str, topic_prefix: str, transport: str
) -> None:
    """Batches of one row: the refused row's follower is read while the refused row is in
    flight, and is not sent once the refusal is known (it would overtake it); it goes out
    after it, once the topic takes it."""
    registry = CollectorRegistry()
    relay, work_topic = await _refusing_relay(
        settings.replace(**TRANSPORTS[transport]),
        kafka_bootstrap,
        topic_prefix,
        registry,
        batch=1,
        batch_growth=1,
    )
    run = asyncio.create_task(relay.run())
    try:

        async def others_published_and_refused_twice() -> bool:
            seqs = by_key(await read_topic(kafka_bootstrap, topic_prefix + EVENT_TYPE))
            return all(seqs.get(str(key_id(k))) == [1, 2, 3] for k in range(12)) and (
                _sample(registry, "spectral_outbox_relay_refused_total", reason="message_too_large")
                >= 2
            )

        await eventually(others_published_and_refused_twice, timeout=60)
        assert _poison_seqs(await read_topic(kafka_bootstrap, topic_prefix + EVENT_TYPE)) == []
        await _set_limit(kafka_bootstrap, work_topic, DEFAULT_LIMIT)

        async def drained() -> bool:
            return await outbox_counts(database_url) == (38, 0)

        await eventually(drained, timeout=30)
        assert len(await read_all(kafka_bootstrap, work_topic, timeout=10)) == 1
        assert _poison_seqs(await read_topic(kafka_bootstrap, topic_prefix + EVENT_TYPE)) == [1]
    finally:
        relay.stop()
        await asyncio.wait_for(run, timeout=30)
