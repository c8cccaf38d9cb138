"""Outbox pruning against the real broker and database, with the real relay: published rows
leave after the retention, unpublished rows never, delayed rows keep their key's order, and a
relay that crashed between publish and mark holds the dedup record back until its re-sends can
no longer be read."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from consumers.rule_candidates.deployment import build
from spectral.engine.engine import ConsumerEngine, EngineOptions, RunSummary
from spectral.engine.handler import Outcome
from spectral.maintenance.policy import Hold
from spectral.outbox.writer import OutboxItem, enqueue
from spectral.settings import Settings
from tests.faults.outbox.relay.test_relay_faults import start_relay, wait_exit
from tests.integration.maintenance.support import (
    age,
    clock_went_back,
    generations,
    run_maintenance,
    session,
)
from tests.integration.outbox.relay.support import (
    EVENT_TYPE,
    by_key,
    enqueue_numbered,
    key_id,
    make_relay,
    numbered,
    outbox_counts,
    read_topic,
)

pytestmark = pytest.mark.integration

DAY = timedelta(days=1)
HOUR = timedelta(hours=1)


async def test_published_rows_leave_after_the_retention_and_unpublished_rows_never(
    settings: Settings, database_url: str
) -> None:
    await enqueue_numbered(database_url, [(key_id(k), s) for k in range(4) for s in range(1, 6)])
    assert (await make_relay(settings, once=True).run()).published == 20
    started = await run_maintenance(settings, outbox_retention=HOUR)  # generation 1 ends
    assert started.outbox.started == 2
    await enqueue_numbered(database_url, [(key_id(9), s) for s in range(1, 6)])  # generation 2

    await age(database_url, DAY)
    checked = await run_maintenance(settings, outbox_retention=HOUR)
    assert checked.outbox.fully_published == [1]
    assert checked.outbox.pruned == {}  # published, but not yet for the retention
    await age(database_url, 2 * HOUR)
    pruned = await run_maintenance(settings, outbox_retention=HOUR)
    assert list(pruned.outbox.pruned) == [1]
    assert pruned.outbox.waiting_for_relay == [2]
    assert await outbox_counts(database_url) == (5, 5)

    for _ in range(3):  # the relays stay away for a long time: nothing unpublished leaves
        await age(database_url, 30 * DAY)
        report = await run_maintenance(settings, outbox_retention=HOUR)
        assert report.outbox.waiting_for_relay == [2]
        assert report.ok
    assert await outbox_counts(database_url) == (5, 5)

    assert (await make_relay(settings, once=True).run()).published == 5
    await run_maintenance(settings, outbox_retention=HOUR)
    await age(database_url, 2 * HOUR)
    last = await run_maintenance(settings, outbox_retention=HOUR)
    assert 2 in last.outbox.pruned
    assert await outbox_counts(database_url) == (0, 0)
    rows = {r["generation"]: r for r in await generations(database_url, "outbox")}
    assert rows[2]["rows_pruned"] is not None


async def test_delayed_rows_move_to_the_current_generation_and_keep_their_key_order(
    settings: Settings, database_url: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    later = datetime.now(UTC) + HOUR
    await enqueue_numbered(database_url, [(key_id(1), 1), (key_id(2), 1)])
    await enqueue_numbered(database_url, [(key_id(1), 2)], available_at=later)
    await enqueue_numbered(database_url, [(key_id(1), 3), (key_id(2), 2)])
    assert (await make_relay(settings, once=True).run()).published == 3  # not key 1's #2, #3
    await run_maintenance(settings, outbox_retention=HOUR)  # generation 1 ends
    moved = await run_maintenance(settings, outbox_retention=HOUR)
    assert moved.outbox.moved_delayed_rows == 2
    assert moved.outbox.fully_published == [1]
    async with session(database_url) as admin:
        slots = await admin.fetch("SELECT slot FROM core.outbox WHERE published_at IS NULL")
        assert {r["slot"] for r in slots} == {1}
        await admin.execute("UPDATE core.outbox SET available_at = now() WHERE slot = 1")
    assert (await make_relay(settings, once=True).run()).published == 2
    records = await read_topic(kafka_bootstrap, topic_prefix + EVENT_TYPE)
    assert by_key(records) == {str(key_id(1)): [1, 2, 3], str(key_id(2)): [1, 2]}


async def test_a_row_written_without_a_delay_is_due_though_the_clock_went_back_since(
    settings: Settings, database_url: str
) -> None:
    """A row written without a delay is publishable at once whatever the clock does after its
    write (the relay publishes it): maintenance waits for the relay rather than moving it, and
    moves the delayed rows only — with the row of their key written after them."""
    await enqueue_numbered(database_url, [(key_id(1), 1)])
    await enqueue_numbered(
        database_url, [(key_id(2), 1)], available_at=datetime.now(UTC) + 2 * HOUR
    )
    await enqueue_numbered(database_url, [(key_id(2), 2)])
    await clock_went_back(database_url, HOUR)
    await run_maintenance(settings, outbox_retention=HOUR)  # generation 1 ends
    report = await run_maintenance(settings, outbox_retention=HOUR)
    assert report.outbox.moved_delayed_rows == 0  # key 1's row is due: the relay's to publish
    assert report.outbox.waiting_for_relay == [1]
    assert (await make_relay(settings, once=True).run()).published == 1
    report = await run_maintenance(settings, outbox_retention=HOUR)
    assert report.outbox.moved_delayed_rows == 2  # key 2's two rows
    assert report.outbox.fully_published == [1]
    async with session(database_url) as admin:
        rows = await admin.fetch(
            "SELECT record_key, slot, published_at FROM core.outbox ORDER BY id"
        )
    assert [(r["record_key"], r["slot"], r["published_at"] is None) for r in rows] == [
        (str(key_id(1)), 0, False),
        (str(key_id(2)), 1, True),
        (str(key_id(2)), 1, True),
    ]


async def _consume(settings: Settings) -> RunSummary:
    assert settings.kafka_bootstrap is not None
    assert settings.database_url is not None
    url = settings.database_url.get_secret_value()
    engine = ConsumerEngine(
        build(settings, url, CollectorRegistry()),
        settings,
        kafka_bootstrap=settings.kafka_bootstrap,
        database_url=url,
        options=EngineOptions(stop_when_idle=3.0),
        registry=CollectorRegistry(),
    )
    return await engine.run()


async def test_a_relay_crash_and_a_consumer_down_for_days_still_apply_each_event_once(
    settings: Settings,
    spectral_env: dict[str, str],
    database_url: str,
    tmp_path: Path,
) -> None:
    """The relay publishes, dies before marking; the consumer applies the first copies and goes
    away. Weeks pass: the outbox generation holding the unmarked rows is hot, so the dedup
    record is never rotated past them. The relay comes back and publishes every row again; the
    consumer comes back and deduplicates each copy."""
    await enqueue_numbered(database_url, [(key_id(k), s) for k in range(3) for s in range(1, 4)])
    crashed = start_relay(spectral_env, tmp_path / "relay.log", crash=True)
    assert await wait_exit(crashed) == 137  # the crash hook: published, not marked
    assert await outbox_counts(database_url) == (9, 9)
    first = await _consume(settings)
    assert first.counts[Outcome.APPLIED] == 9

    for _ in range(6):  # six weeks without a relay and without the consumer
        report = await run_maintenance(settings, outbox_retention=HOUR)
        assert report.dedup.hold in {Hold.OUTBOX, Hold.NONE}
        assert report.dedup.forgotten_generation is None
        await age(database_url, 7 * DAY)
    assert report.outbox.waiting_for_relay == [1]

    relay = subprocess.run(
        [str(Path(sys.executable).with_name("spectral")), "outbox", "relay", "--once"],
        env=spectral_env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert relay.returncode == 0, relay.stderr
    assert await outbox_counts(database_url) == (9, 0)
    again = await _consume(settings)
    assert again.counts[Outcome.DEDUPLICATED] == 9
    assert again.counts[Outcome.APPLIED] == 0


async def test_a_rotation_waits_for_writers_in_flight_and_is_postponed_past_the_lock_timeout(
    settings: Settings, database_url: str
) -> None:
    async with session(database_url, "spectral_producer") as writer:
        transaction = writer.transaction()
        await transaction.start()
        await enqueue(writer, [OutboxItem(numbered(key_id(1), 1), str(key_id(1)))])
        held = await run_maintenance(settings, lock_timeout=timedelta(milliseconds=200))
        await transaction.commit()
    assert held.ok
    assert held.outbox.started is None  # left to the next pass, not an error
    async with session(database_url) as admin:
        assert await admin.fetchval("SELECT slot FROM core.outbox") == 0  # generation 1's
    assert (await run_maintenance(settings)).outbox.started == 2
