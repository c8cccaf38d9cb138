"""The outbox relay against the real broker: topic, key, headers, marks, per-key order with
delayed rows and with two relays at once, gauges."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from uuid import UUID

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from contracts import (
    MAX_RECORD_BYTES,
    WORK_ITEM_ENQUEUED,
    WorkItemEnqueuedPayload,
    work_item_enqueued_event,
)
from spectral.kafka.topology import TopicPolicy, declared_topics
from spectral.observability.health import Health
from spectral.outbox.relay import OutboxRelay, RelayMetrics, RelayOptions, RelayReport
from spectral.outbox.relay.shards import LOCK_CLASS, SHARD_COUNT, shard_of
from spectral.outbox.writer import OutboxItem, enqueue
from spectral.settings import Settings
from tests.events import encode
from tests.integration.maintenance.support import clock_went_back
from tests.integration.outbox.relay.support import (
    EVENT_TYPE,
    T0,
    by_key,
    enqueue_numbered,
    key_id,
    make_relay,
    outbox_counts,
    read_topic,
)
from tests.kafka_support import PRODUCING, TRANSPORTS, create_topics, read_all
from tests.support import eventually

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("transport", PRODUCING)
async def test_every_row_is_published_with_its_key_and_headers_then_marked(
    settings: Settings, database_url: str, kafka_bootstrap: str, topic_prefix: str, transport: str
) -> None:
    settings = settings.replace(**TRANSPORTS[transport])
    pairs = [(key_id(k), s) for s in range(1, 11) for k in range(12)]
    await enqueue_numbered(database_url, pairs)
    registry = CollectorRegistry()
    report = await make_relay(settings, registry, once=True, batch=17).run()
    assert report.published == len(pairs)
    # A backlog grows the batches: 17, 34, 68 (each fetch full; 4 x 17 is the most), then 1.
    assert report.batches == 4
    assert await outbox_counts(database_url) == (len(pairs), 0)
    records = await read_topic(kafka_bootstrap, topic_prefix + EVENT_TYPE)
    assert len(records) == len(pairs)
    for r in records:
        assert r.headers.keys() == {"event_type", "idempotency_key", "outbox.ready_at"}
        assert r.headers["event_type"] == EVENT_TYPE
        assert r.headers["idempotency_key"] == r.idempotency_key
        assert r.idempotency_key.startswith(r.key + ":")
    for key, seqs in by_key(records).items():
        assert seqs == list(range(1, 11)), key
    assert len({r.partition for r in records if r.key == str(key_id(0))}) == 1
    assert registry.get_sample_value("spectral_outbox_relay_published_total") == len(pairs)
    assert registry.get_sample_value("spectral_outbox_depth") == 0
    # A second pass finds nothing to do.
    assert (await make_relay(settings, once=True).run()).published == 0


async def test_a_delayed_row_holds_back_the_later_rows_of_its_key_only(
    settings: Settings, database_url: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)  # still delayed however slow the run
    await enqueue_numbered(database_url, [(key_id(1), 1), (key_id(2), 1)])
    await enqueue_numbered(database_url, [(key_id(1), 2)], available_at=later)
    await enqueue_numbered(database_url, [(key_id(1), 3), (key_id(2), 2)])
    registry = CollectorRegistry()
    first = await make_relay(settings, registry, once=True).run()
    assert first.published == 3  # key 1: #1 only; key 2: #1 and #2
    assert registry.get_sample_value("spectral_outbox_depth") == 2
    conn = await asyncpg.connect(database_url)
    try:  # the delay runs out
        await conn.execute("UPDATE core.outbox SET available_at = now() WHERE available_at > now()")
    finally:
        await conn.close()
    second = await make_relay(settings, once=True).run()
    assert second.published == 2
    seqs = by_key(await read_topic(kafka_bootstrap, topic_prefix + EVENT_TYPE))
    assert seqs == {str(key_id(1)): [1, 2, 3], str(key_id(2)): [1, 2]}


async def test_a_row_written_without_a_delay_goes_out_though_the_clock_went_back_since(
    settings: Settings, database_url: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    """A row's write time is the database's clock. Stepped back after the write (an NTP
    correction), that clock puts the row's write, and its available_at, in the future. Only a
    row written with a delay (available_at later than its write) waits for the clock: one
    written without goes out at once, and the later rows of its key behind it, in order — not
    an hour later, with the gauges showing nothing waiting."""
    await enqueue_numbered(database_url, [(key_id(1), 1)])
    await clock_went_back(database_url, timedelta(hours=1))
    await enqueue_numbered(database_url, [(key_id(1), 2), (key_id(2), 1)])
    registry = CollectorRegistry()
    run = await make_relay(settings, registry, once=True).run()
    assert run.published == 3
    assert registry.get_sample_value("spectral_outbox_depth") == 0
    seqs = by_key(await read_topic(kafka_bootstrap, topic_prefix + EVENT_TYPE))
    assert seqs == {str(key_id(1)): [1, 2], str(key_id(2)): [1]}


async def test_gauges_report_depth_and_age_of_the_oldest_row(
    settings: Settings, database_url: str
) -> None:
    await enqueue_numbered(database_url, [(key_id(1), 1), (key_id(2), 1)])
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("UPDATE core.outbox SET available_at = now() - interval '90 seconds'")
    finally:
        await conn.close()
    registry = CollectorRegistry()
    relay = make_relay(settings, registry, poll_interval=0.05)
    task = asyncio.create_task(relay.run())

    async def stats_seen() -> bool:
        return (registry.get_sample_value("spectral_outbox_oldest_age_seconds") or 0) >= 90

    try:
        await eventually(stats_seen, timeout=10)
        # read on a clock of their own, possibly before the session holds its shards
        assert registry.get_sample_value("spectral_outbox_depth") == 2

        async def holding() -> bool:
            held = registry.get_sample_value("spectral_outbox_relay_shards_held")
            return held == SHARD_COUNT

        await eventually(holding, timeout=30)

        async def drained() -> bool:
            return registry.get_sample_value("spectral_outbox_depth") == 0

        await eventually(drained, timeout=15)
        assert registry.get_sample_value("spectral_outbox_oldest_age_seconds") == 0
    finally:
        relay.stop()
        await asyncio.wait_for(task, 10)


async def test_the_age_gauge_leaves_out_the_rows_queued_behind_a_delayed_row_of_their_key(
    settings: Settings, database_url: str
) -> None:
    """Guarantee: spectral_outbox_oldest_age_seconds is how long the oldest *publishable*
    unpublished row has waited, 0 when none waits (docs/reference/metrics.md); the page
    SpectralOutboxBacklogOld (> 300 for 5m) reads it as "relays down or Kafka refusing".

    A row queued behind a delayed row of its key (a retry an hour away) is not publishable:
    the relay holds it until the delayed row goes (fetch_batch). outbox_stats counted it as
    publishable all the same (its filter was the row's own time alone, not its key's delayed
    rows), so the gauge showed its age and grew: the page fired for a relay that had nothing
    to publish. Minimal reproduction: key 1's row delayed an hour, then key 1's next row,
    written 10 minutes ago without a delay; a relay pass published nothing and set the gauge
    to ~600 s. Predated 0055 (the filter was `available_at <= now()`, the same rows);
    outbox_stats now leaves out the rows of a key from its first delayed row on
    (delayed_keys)."""
    await enqueue_numbered(
        database_url, [(key_id(1), 1)], available_at=datetime.now(UTC) + timedelta(hours=1)
    )
    [later] = await enqueue_numbered(database_url, [(key_id(1), 2)])
    conn = await asyncpg.connect(database_url)
    try:  # written 10 minutes ago
        await conn.execute(
            "UPDATE core.outbox SET created_at = created_at - interval '10 minutes', "
            "available_at = available_at - interval '10 minutes' WHERE id = $1",
            later,
        )
    finally:
        await conn.close()
    registry = CollectorRegistry()
    run = await make_relay(settings, registry, once=True).run()
    assert run.published == 0  # key 1's second row waits behind its first
    assert registry.get_sample_value("spectral_outbox_depth") == 2
    assert registry.get_sample_value("spectral_outbox_oldest_age_seconds") == 0


async def test_the_sql_shard_formula_is_the_python_one(database_url: str) -> None:
    keys = [f"key-{i}" for i in range(300)] + [str(key_id(i)) for i in range(300)] + ["ü∂"]
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT k, (('x' || left(md5(k), 7))::bit(28)::int % $2) AS s "
            "FROM unnest($1::text[]) AS k",
            keys,
            SHARD_COUNT,
        )
    finally:
        await conn.close()
    assert {r["k"]: r["s"] for r in rows} == {k: shard_of(k) for k in keys}


async def test_two_relays_at_once_share_the_keys_and_keep_per_key_order(
    settings_factory: Callable[..., Settings],
    database_url: str,
    kafka_bootstrap: str,
    topic_prefix: str,
) -> None:
    settings = settings_factory()
    keys, rounds = 40, 30
    relays = [
        make_relay(settings, poll_interval=0.02, batch=25, rebalance_interval=0.2) for _ in range(2)
    ]
    tasks: list[asyncio.Task[RelayReport]] = [asyncio.create_task(r.run()) for r in relays]
    try:
        # The producer: each round is one transaction with the next number of every key
        # (a producer serialises a key's writes, so id order is commit order per key).
        for seq in range(1, rounds + 1):
            await enqueue_numbered(database_url, [(key_id(k), seq) for k in range(keys)])
            await asyncio.sleep(0.05)

        async def drained() -> bool:
            return (await outbox_counts(database_url))[1] == 0

        await eventually(drained, timeout=60)
    finally:
        for relay in relays:
            relay.stop()
        reports = [await asyncio.wait_for(t, 20) for t in tasks]
    assert sum(r.published for r in reports) == keys * rounds
    assert all(r.published > 0 for r in reports), reports  # both relays did work
    seqs = by_key(await read_topic(kafka_bootstrap, topic_prefix + EVENT_TYPE))
    assert len(seqs) == keys
    for key, numbers in seqs.items():
        assert numbers == list(range(1, rounds + 1)), key  # no crash: no duplicate either


async def test_a_relay_with_no_shard_left_is_a_ready_standby(
    settings: Settings, database_url: str
) -> None:
    """More relays than shards: the ones left without a shard while the others hold all of
    them are ready standbys (an orchestrator must not restart them in a loop); they take
    shards over as soon as a holder lets go."""
    others = await asyncpg.connect(database_url)  # stands for the relays holding every shard
    health = Health()
    relay = OutboxRelay(
        settings,
        kafka_bootstrap=settings.kafka_bootstrap or "",
        database_url=database_url,
        metrics=RelayMetrics(CollectorRegistry()),
        options=RelayOptions(rebalance_interval=0.2, poll_interval=0.1),
        health=health,
    )
    try:
        for shard in range(SHARD_COUNT):
            await others.execute("SELECT pg_advisory_lock($1::int, $2::int)", LOCK_CLASS, shard)
        run = asyncio.create_task(relay.run())

        def shards() -> dict[str, object]:
            check: dict[str, object] = health.ready()[1]["checks"].get("shards", {})
            return check

        async def standby() -> bool:
            return "standby" in str(shards().get("detail"))

        await eventually(standby, timeout=30)
        assert shards()["ok"] is True

        await others.execute("SELECT pg_advisory_unlock_all()")

        async def holding() -> bool:
            return "held" in str(shards().get("detail")) and "standby" not in str(
                shards().get("detail")
            )

        await eventually(holding, timeout=30)
        assert shards()["ok"] is True
        relay.stop()
        await asyncio.wait_for(run, timeout=30)
    finally:
        relay.stop()
        await others.close()


@pytest.mark.parametrize("transport", PRODUCING)
async def test_a_record_as_large_as_the_contract_allows_is_published(
    settings: Settings, database_url: str, kafka_bootstrap: str, topic_prefix: str, transport: str
) -> None:
    """A valid record whose value is exactly 1 MiB leaves the relay (aiokafka's default request
    limit refuses it once its key and headers are added) and the declared topic takes it."""
    settings = settings.replace(**TRANSPORTS[transport])
    for topic in declared_topics([WORK_ITEM_ENQUEUED], topic_prefix, TopicPolicy(), 1):
        await create_topics(kafka_bootstrap, [topic.name], topic.partitions, dict(topic.config))
    item = UUID(int=7)
    payload = WorkItemEnqueuedPayload(
        work_item_id=item,
        thread_id=UUID(int=8),
        sequence=0,
        attempt=1,
        lock_scope="project:big",
        not_before=T0,
        kind="story_generate_epic",
        target_ref="doc#E1",
        input={"blob": ""},
    )
    envelope = work_item_enqueued_event(payload, occurred_at=T0)
    blob = "x" * (MAX_RECORD_BYTES - len(encode(envelope)))
    envelope = work_item_enqueued_event(
        payload.model_copy(update={"input": {"blob": blob}}), occurred_at=T0
    )
    assert len(encode(envelope)) == MAX_RECORD_BYTES
    conn = await asyncpg.connect(database_url)
    try:
        async with conn.transaction():
            await enqueue(conn, [OutboxItem(envelope, "project:big")])
    finally:
        await conn.close()
    report = await make_relay(settings, once=True).run()
    assert report.published == 1
    [record] = await read_all(kafka_bootstrap, topic_prefix + WORK_ITEM_ENQUEUED, timeout=30)
    assert len(record.value) == MAX_RECORD_BYTES
    assert record.key == b"project:big"
