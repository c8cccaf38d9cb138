"""The consumer engine against the real broker and database, with a minimal handler."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from contracts import FAILURE_CLUSTER_DETECTED, format_utc
from spectral.engine.engine import ConsumerEngine, EngineOptions
from spectral.engine.handler import Delivery, Handler, HandlerResult, Outcome, Rejection
from spectral.kafka.freshness import READY_AT_HEADER
from spectral.kafka.topics import dlq_topic, topic_for
from spectral.observability.progress import EngineHook
from spectral.settings import Settings
from tests.events import encode, record_key
from tests.kafka_support import (
    cluster_event,
    committed_offsets,
    create_topics,
    end_offsets,
    publish,
    publish_envelopes,
    read_all,
)

pytestmark = pytest.mark.integration


class RecordingHandler(Handler[None]):
    """Appends one row per applied event; the test counts rows per key to prove exactly-once.

    A snapshot whose suggested_rule_stub is "reject" is refused, "stale" is reported stale, and
    "explode" makes the whole statement fail (a data error) so the engine must isolate it.
    """

    name = "engine-test"
    event_types = (FAILURE_CLUSTER_DETECTED,)

    async def apply(
        self, conn: asyncpg.Connection, deliveries: Sequence[Delivery]
    ) -> HandlerResult[None]:
        result: HandlerResult[None] = HandlerResult()
        keep = []
        for d in deliveries:
            stub = d.envelope.payload.suggested_rule_stub
            if stub == "reject":
                result.rejected.append(Rejection(d, "test_refusal", "refused by the test"))
            elif stub == "stale":
                result.stale.add(d.idempotency_key)
            else:
                keep.append(d)
        if any(d.envelope.payload.suggested_rule_stub == "explode" for d in keep):
            await conn.execute("SELECT 1 / 0")
        await conn.execute(
            "INSERT INTO engine_effects (idempotency_key, part, off) "
            "SELECT * FROM unnest($1::text[], $2::int[], $3::bigint[])",
            [d.idempotency_key for d in keep],
            [d.partition for d in keep],
            [d.offset for d in keep],
        )
        return result


async def _effects(database_url: str) -> dict[str, int]:
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT idempotency_key, count(*) AS n FROM engine_effects GROUP BY 1"
        )
    finally:
        await conn.close()
    return {r["idempotency_key"]: r["n"] for r in rows}


@pytest.fixture
async def effects_table(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "CREATE TABLE engine_effects (idempotency_key text NOT NULL, part int, off bigint)"
        )
    finally:
        await conn.close()


def _engine(
    settings: Settings,
    group: str | None = None,
    idle: float = 2.0,
    *,
    max_batch: int = 500,
    hook: EngineHook | None = None,
    handler: Handler[Any] | None = None,
) -> ConsumerEngine:
    assert settings.kafka_bootstrap is not None
    assert settings.database_url is not None
    return ConsumerEngine(
        handler or RecordingHandler(),
        settings,
        kafka_bootstrap=settings.kafka_bootstrap,
        database_url=settings.database_url.get_secret_value(),
        options=EngineOptions(group=group, stop_when_idle=idle, max_batch=max_batch),
        registry=CollectorRegistry(),
        hook=hook,
    )


@pytest.mark.usefixtures("effects_table")
async def test_duplicates_apply_once_and_offsets_follow_the_commit(
    settings: Settings, kafka_bootstrap: str, database_url: str
) -> None:
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await create_topics(kafka_bootstrap, [topic], partitions=3)
    events = [cluster_event() for _ in range(30)]
    # The same snapshots again, each with a new event_id (a producer re-emitting after restart).
    again = [e.model_copy(update={"event_id": uuid.uuid4()}) for e in events[:10]]
    await publish_envelopes(kafka_bootstrap, topic, events + again + events[:5])

    summary = await _engine(settings).run()

    effects = await _effects(database_url)
    assert set(effects) == {e.idempotency_key for e in events}
    assert set(effects.values()) == {1}
    assert summary.counts[Outcome.APPLIED] == 30
    assert summary.counts[Outcome.DEDUPLICATED] == 15
    committed = await committed_offsets(
        kafka_bootstrap, settings.topic_prefix + "engine-test", topic
    )
    assert committed == await end_offsets(kafka_bootstrap, topic)

    # The same group again: nothing left to read. A fresh group: everything deduplicated.
    assert (await _engine(settings).run()).records == 0
    rerun = await _engine(settings, group="engine-test-fresh").run()
    assert rerun.counts[Outcome.DEDUPLICATED] == 45
    assert rerun.counts[Outcome.APPLIED] == 0
    assert set((await _effects(database_url)).values()) == {1}


@pytest.mark.usefixtures("effects_table")
async def test_poison_records_are_dead_lettered_and_the_partition_moves_on(
    settings: Settings, kafka_bootstrap: str, database_url: str
) -> None:
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    # Topics that accept records over 1 MiB, so the contract's own size limit is what refuses them.
    big = {"max.message.bytes": str(4 * 1024 * 1024)}
    await create_topics(kafka_bootstrap, [topic, dlq_topic(topic)], partitions=1, configs=big)
    good_before, good_after = cluster_event(), cluster_event()
    tampered = json.loads(encode(cluster_event()))
    tampered["payload"]["failure_count"] = 99  # content changed, hash not recomputed
    unknown = json.loads(encode(cluster_event()))
    unknown["event_type"] = "platform.something.else"
    over_bound = json.loads(encode(cluster_event()))
    over_bound["payload"]["severity"] = "catastrophic"
    reject, explode = cluster_event(stub="reject"), cluster_event(stub="explode")
    records: list[tuple[bytes | None, bytes]] = [
        (record_key(good_before), encode(good_before)),
        (b"k", b"{not json"),
        (b"k", json.dumps(unknown).encode()),
        (b"k", json.dumps(tampered).encode()),
        (b"k", json.dumps(over_bound).encode()),
        (b"k", b"[1, 2]"),
        (b"k", b"x" * (1024 * 1024 + 1)),
        (record_key(reject), encode(reject)),
        (record_key(explode), encode(explode)),
        (record_key(good_after), encode(good_after)),
    ]
    await publish(kafka_bootstrap, topic, records)

    summary = await _engine(settings).run()

    effects = await _effects(database_url)
    assert set(effects) == {good_before.idempotency_key, good_after.idempotency_key}
    assert summary.counts[Outcome.DEAD_LETTERED] == 8
    dead = await read_all(kafka_bootstrap, dlq_topic(topic))
    reasons = [d.header("dlq.reason") for d in dead]
    assert reasons == [
        "not_json",
        "unknown_event_type",
        "hash_mismatch",
        "invalid_payload",
        "not_an_object",
        "too_large",
        "handler_rejected",
        "handler_error",
    ]
    for letter in dead:
        assert letter.header("dlq.source.topic") == topic
        assert letter.header("dlq.consumer") == "engine-test"
        offset = int(letter.header("dlq.source.offset") or "-1")
        assert (letter.key, letter.value) == records[offset]  # the original key and bytes
    committed = await committed_offsets(
        kafka_bootstrap, settings.topic_prefix + "engine-test", topic
    )
    assert committed == {0: len(records)}


@pytest.mark.usefixtures("effects_table")
async def test_stale_outcome_is_recorded_and_deduplicated_later(
    settings: Settings, kafka_bootstrap: str, database_url: str
) -> None:
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await create_topics(kafka_bootstrap, [topic])
    stale = cluster_event(stub="stale")
    await publish_envelopes(kafka_bootstrap, topic, [stale, cluster_event()])
    summary = await _engine(settings).run()
    assert summary.counts[Outcome.STALE] == 1
    assert summary.counts[Outcome.APPLIED] == 1
    conn = await asyncpg.connect(database_url)
    try:
        outcome = await conn.fetchval(
            "SELECT outcome FROM core.event_handled_keys WHERE idempotency_key = $1",
            stale.idempotency_key,
        )
    finally:
        await conn.close()
    assert outcome == "stale"
    rerun = await _engine(settings, group="again").run()
    assert rerun.counts[Outcome.DEDUPLICATED] == 2


class CarryingHandler(Handler[str]):
    """Carries each applied key to after_commit; a snapshot whose stub is "explode" fails the
    whole statement, so the engine falls back to one delivery per transaction."""

    name = "carry-test"
    event_types = (FAILURE_CLUSTER_DETECTED,)

    def __init__(self) -> None:
        self.carried: list[str] = []
        self.results = 0

    async def apply(
        self, conn: asyncpg.Connection, deliveries: Sequence[Delivery]
    ) -> HandlerResult[str]:
        if any(d.envelope.payload.suggested_rule_stub == "explode" for d in deliveries):
            await conn.execute("SELECT 1 / 0")
        keys = [d.idempotency_key for d in deliveries]
        return HandlerResult(carry=keys, facts={"seen": len(keys)})

    async def after_commit(self, result: HandlerResult[str]) -> None:
        self.results += 1
        self.carried.extend(result.carry)


async def test_the_one_by_one_fallback_keeps_what_the_good_deliveries_carry(
    settings: Settings, kafka_bootstrap: str
) -> None:
    """A data error in one delivery: the others are applied one by one and what they carry
    (e.g. the items a work-executor batch claimed) still reaches after_commit."""
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await create_topics(kafka_bootstrap, [topic, dlq_topic(topic)])
    good = [cluster_event() for _ in range(4)]
    await publish_envelopes(kafka_bootstrap, topic, [*good[:2], cluster_event(stub="explode")])
    await publish_envelopes(kafka_bootstrap, topic, good[2:])
    handler = CarryingHandler()
    summary = await _engine(settings, handler=handler).run()
    assert sorted(handler.carried) == sorted(e.idempotency_key for e in good)
    assert summary.counts[Outcome.APPLIED] == 4
    assert summary.counts[Outcome.DEAD_LETTERED] == 1
    assert summary.facts["seen"] == 4  # facts merged too


@pytest.mark.usefixtures("effects_table")
async def test_freshness_is_observed_after_the_commit_for_records_the_relay_stamped(
    settings: Settings, kafka_bootstrap: str
) -> None:
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await create_topics(kafka_bootstrap, [topic])
    events = [cluster_event() for _ in range(6)]
    written = datetime.now(UTC) - timedelta(seconds=2)
    stamped = [(READY_AT_HEADER, format_utc(written).encode())]
    hostile: list[list[tuple[str, bytes]]] = [
        [(READY_AT_HEADER, b"2026-11-24T08:00:00")],  # no offset: no clock said this
        [(READY_AT_HEADER, b"\xff\xfe")],  # not text
        [(READY_AT_HEADER, b"9" * 5000)],  # far too long
        [],  # not from the relay
    ]
    await publish(
        kafka_bootstrap,
        topic,
        [(record_key(e), encode(e)) for e in events],
        [stamped, stamped, *hostile],
    )
    registry = CollectorRegistry()
    engine = ConsumerEngine(
        RecordingHandler(),
        settings,
        kafka_bootstrap=kafka_bootstrap,
        database_url=settings.database_url.get_secret_value() if settings.database_url else "",
        options=EngineOptions(stop_when_idle=2.0),
        registry=registry,
    )
    summary = await engine.run()
    assert summary.counts[Outcome.APPLIED] == len(events)
    labels = {"consumer": "engine-test"}
    count = registry.get_sample_value("spectral_consumer_freshness_seconds_count", labels)
    total = registry.get_sample_value("spectral_consumer_freshness_seconds_sum", labels)
    assert count == 2  # the two stamped records only
    assert total is not None
    assert 2 * 2 <= total < 2 * 120  # two seconds old at least, when written; not absurd


def test_results_merge_every_field() -> None:
    first: HandlerResult[int] = HandlerResult(stale={"a"}, facts={"n": 1, "x": 2}, carry=[1])
    second: HandlerResult[int] = HandlerResult(stale={"b"}, facts={"n": 3}, carry=[2, 3])
    merged = first.merge(second)
    assert merged.stale == {"a", "b"}
    assert merged.facts == {"n": 4, "x": 2}
    assert merged.carry == [1, 2, 3]
    assert first.carry == [1]  # the inputs are left as they were


class SessionLeavingHandler(RecordingHandler):
    """Leaves a session setting behind in every batch and notes what each batch found, and every
    message its connections were sent."""

    def __init__(self) -> None:
        self.found: list[str] = []
        self.sent: list[str] = []
        self._watched: set[int] = set()

    async def apply(
        self, conn: asyncpg.Connection, deliveries: Sequence[Delivery]
    ) -> HandlerResult[None]:
        if conn.get_server_pid() not in self._watched:  # a query logger stays with its connection
            self._watched.add(conn.get_server_pid())
            conn.add_query_logger(lambda logged: self.sent.append(logged.query))
        self.found.append(await conn.fetchval("SHOW application_name"))
        await conn.execute("SET application_name = 'left-behind'")
        return await super().apply(conn, deliveries)


@pytest.mark.usefixtures("effects_table")
async def test_a_batch_finds_the_session_reset_without_a_message_for_it(
    settings: Settings, kafka_bootstrap: str, database_url: str
) -> None:
    """The engine's pool resets a connection in the message of its batch's COMMIT: each batch
    finds the session as new (nothing a batch before it left behind), and no reset travels on
    its own between the batches."""
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await create_topics(kafka_bootstrap, [topic], partitions=1)
    events = [cluster_event() for _ in range(40)]
    await publish_envelopes(kafka_bootstrap, topic, events)
    handler = SessionLeavingHandler()
    summary = await _engine(settings, max_batch=5, handler=handler).run()
    assert summary.counts[Outcome.APPLIED] == len(events)
    assert len(handler.found) >= len(events) // 5
    assert set(handler.found) == {""}
    commits = [q for q in handler.sent if "COMMIT;" in q]
    assert commits
    assert all("RESET ALL;" in q for q in commits)
    last = max(i for i, q in enumerate(handler.sent) if "COMMIT;" in q)
    between = handler.sent[:last]
    assert [q for q in between if "RESET ALL;" in q and "COMMIT;" not in q] == []
