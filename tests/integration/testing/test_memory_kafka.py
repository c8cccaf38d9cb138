"""spectral.testing's in-memory Kafka, as a plugin's tests use it: a handler run through the
real engine on the test's own connection, inside its transaction, with no broker."""

from __future__ import annotations

import asyncpg
import pytest

from contracts import FAILURE_CLUSTER_DETECTED
from spectral.engine.handler import Outcome
from spectral.testing import MemoryKafka, apply
from tests.events import EVENTS
from tests.integration.engine.test_engine import (  # the same handler and effects table
    RecordingHandler,
    effects_table,  # noqa: F401 - a fixture, used by name
)
from tests.kafka_support import cluster_event

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("effects_table")]


async def _effects(conn: asyncpg.Connection) -> list[str]:
    return [r[0] for r in await conn.fetch("SELECT idempotency_key FROM engine_effects")]


async def test_envelopes_are_applied_once_inside_the_callers_transaction(
    database_url: str,
) -> None:
    events = [cluster_event() for _ in range(5)]
    conn = await asyncpg.connect(database_url)
    observer = await asyncpg.connect(database_url)
    try:
        transaction = conn.transaction()
        await transaction.start()
        done = await apply(RecordingHandler(), conn, *events, events[0], events[1])
        assert done.count(Outcome.APPLIED) == 5
        assert done.count("deduplicated") == 2
        assert sorted(await _effects(conn)) == sorted(e.idempotency_key for e in events)
        assert await _effects(observer) == []  # nothing committed: the test's transaction
        await transaction.rollback()
        assert await _effects(conn) == []
    finally:
        await observer.close()
        await conn.close()


async def test_hostile_and_rejected_records_are_dead_lettered_with_their_reason(
    database_url: str,
) -> None:
    kafka = MemoryKafka(events=EVENTS)
    kafka.publish_raw(FAILURE_CLUSTER_DETECTED, b"\xff not json", key=b"k")
    kafka.publish_raw(FAILURE_CLUSTER_DETECTED, None)
    good, refused = cluster_event(), cluster_event(stub="reject")
    conn = await asyncpg.connect(database_url)
    try:
        async with conn.transaction():
            done = await kafka.apply(RecordingHandler(), conn, good, refused)
            assert done.count(Outcome.APPLIED) == 1
            assert done.count(Outcome.DEAD_LETTERED) == 3
            assert [d.reason for d in done.dead_letters] == [
                "not_json",
                "not_json",  # a null value: no JSON at all
                "handler_rejected",
            ]
            assert {d.dlq["dlq.consumer"] for d in done.dead_letters} == {"engine-test"}
            assert done.dead_letters[0].value == b"\xff not json"
            # A second apply runs only what was published since.
            again = await kafka.apply(RecordingHandler(), conn, good)
            assert again.count(Outcome.DEDUPLICATED) == 1
            assert again.summary.records == 1
    finally:
        await conn.close()
    assert len(kafka.dead_letters(FAILURE_CLUSTER_DETECTED)) == 3


async def test_a_record_too_large_for_the_dead_letter_topic_is_kept_as_a_reference(
    database_url: str,
) -> None:
    kafka = MemoryKafka(events=EVENTS, max_message_bytes=4096)
    kafka.publish_raw(FAILURE_CLUSTER_DETECTED, b"x" * 3000, key=b"k" * 900)
    conn = await asyncpg.connect(database_url)
    try:
        async with conn.transaction():
            done = await kafka.apply(RecordingHandler(), conn)
    finally:
        await conn.close()
    [letter] = done.dead_letters
    assert letter.is_reference
    assert letter.reason == "not_json"


async def test_a_live_member_commits_and_goes_on_where_it_stopped(database_url: str) -> None:
    kafka = MemoryKafka(events=EVENTS, partitions=3)
    first = [cluster_event() for _ in range(30)]
    kafka.publish(*first)
    summary = await kafka.run_until_idle(RecordingHandler(), database_url, idle=0.3)
    assert summary.counts[Outcome.APPLIED] == 30
    kafka.publish(*first[:3], cluster_event())
    second = await kafka.run_until_idle(RecordingHandler(), database_url, idle=0.3)
    assert second.records == 4  # only what came after the committed offsets
    assert second.counts[Outcome.DEDUPLICATED] == 3
