"""`spectral replay work-executor`: a replay never pays twice, a dry run never pays.

The whole path runs first (command -> outbox -> relay -> Kafka -> executor -> ledger) with a
scripted model that counts its calls; then the work-item topic is replayed in every mode and
the model's call count, the ledger and every work table must stay exactly as they were.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import asyncpg
import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from consumers.work_executor.deployment import build
from contracts import WORK_ITEM_ENQUEUED
from producers.work.commands import GenerateAll, GenerateEpic
from spectral.engine.handler import Handler, Outcome
from spectral.kafka.topics import topic_for
from spectral.replay.range import Beginning
from spectral.replay.replay import Mode, ReplayRequest
from spectral.settings import Settings
from tests.integration.replay.support import handled, run_replay
from tests.integration.work.kafka_support import (
    create_work_topic,
    engine_running,
    relay_running,
    settled,
)
from tests.integration.work.support import (
    DOCUMENT,
    PROJECT,
    Harness,
    ScriptedSynthesizer,
    backlog,
    executor_settings,
    harness,
)
from tests.kafka_support import committed_offsets, read_all
from tests.support import eventually

pytestmark = pytest.mark.integration

CONSUMER = "work-executor"
WORK_TABLES = (
    "work.threads",
    "work.work_items",
    "work.ledger_entries",
    "work.documents",
    "work.document_versions",
    "work.mutations",
)


async def _state(admin: asyncpg.Pool) -> dict[str, tuple[int, str]]:
    """Row count and md5 of every row of every work table."""
    out = {}
    for table in WORK_TABLES:
        row = await admin.fetchrow(
            f"SELECT count(*) AS n, md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) "
            f"AS md5 FROM {table} AS t"
        )
        assert row is not None
        out[table] = (row["n"], row["md5"])
    return out


async def _published(admin: asyncpg.Pool, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while await admin.fetchval("SELECT count(*) FROM core.outbox WHERE published_at IS NULL"):
        if time.monotonic() > deadline:
            raise AssertionError("outbox not relayed in time")
        await asyncio.sleep(0.1)


async def _caught_up(
    admin: asyncpg.Pool, kafka_bootstrap: str, database_url: str, topic: str
) -> None:
    """Every event the live run wrote is on the topic and handled by the live group. Terminal
    items are not enough: the event of a retry can still wait in the outbox when the last item
    settles, and a relay of a later step then publishes it, one delivery more than the step
    expects (seen in CI: the dry run's dedup inserts were 3, not 2)."""
    await _published(admin)

    async def all_handled() -> bool:
        records = await read_all(kafka_bootstrap, topic)
        return len(await handled(database_url, CONSUMER)) == len(records)

    await eventually(all_handled, timeout=30)


def _factory(settings: Settings, model: ScriptedSynthesizer) -> Callable[[str], Handler[Any]]:
    return lambda url: build(settings, url, CollectorRegistry(), synthesizer=model)


async def test_replaying_the_executor_pays_nothing_twice_and_a_dry_run_pays_nothing(
    database_url: str, settings: Settings, kafka_bootstrap: str
) -> None:
    topic = await create_work_topic(kafka_bootstrap, settings.topic_prefix)
    assert topic == topic_for(WORK_ITEM_ENQUEUED, settings.topic_prefix)
    current = executor_settings(settings)
    model = ScriptedSynthesizer()
    async with harness(database_url) as h:
        await h.commands.put_document(
            PROJECT, DOCUMENT, backlog("Alpha", "Beta [transient:1]", "Gamma [permanent]")
        )
        await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT))
        live = build(current, database_url, CollectorRegistry(), synthesizer=model)
        async with (
            relay_running(current, kafka_bootstrap, database_url),
            engine_running(live, current, kafka_bootstrap, database_url, CONSUMER),
        ):
            await settled(h.admin)
            await _caught_up(h.admin, kafka_bootstrap, database_url, topic)
        paid = model.total
        assert paid == 4  # E1 once, E2 twice (one transient failure), E3 once (refused)
        state = await _state(h.admin)
        dedup = await handled(database_url, CONSUMER)
        live_offsets = await committed_offsets(
            kafka_bootstrap, settings.topic_prefix + CONSUMER, topic
        )

        # 1. Over an up-to-date ledger: every delivery is deduplicated.
        again = await run_replay(current, _factory(current, model), ReplayRequest(Beginning()))
        assert again.complete
        assert again.counts[Outcome.DEDUPLICATED] == len(dedup) == again.records
        assert model.total == paid
        assert await _state(h.admin) == state
        assert await handled(database_url, CONSUMER) == dedup

        # 2. With the dedup record emptied: no item is claimable any more (all terminal), so
        #    every delivery is stale and nothing is claimed, called or written. An item that is
        #    due but whose event is not in the range (never relayed) is not the replay's
        #    business: an applying replay runs no sweeper, so it stays queued and unpaid.
        await h.commands.put_document(PROJECT, "backlog-0", backlog("Eta"))
        await h.commands.generate_epic(GenerateEpic(PROJECT, "backlog-0", "E1"))
        await h.admin.execute(
            "UPDATE work.work_items SET not_before = now() - interval '1 hour' "
            "WHERE status = 'queued'"
        )
        state = await _state(h.admin)
        await h.admin.execute("DELETE FROM core.event_handled WHERE consumer = $1", CONSUMER)
        rebuilt = await run_replay(current, _factory(current, model), ReplayRequest(Beginning()))
        assert rebuilt.counts[Outcome.STALE] == len(dedup)
        assert rebuilt.facts.get("waiting", 0) == 0
        await asyncio.sleep(0.5)  # background claims started by the replay would have it by now
        assert model.total == paid
        assert await _state(h.admin) == state
        assert [r["status"] for r in await h.items()].count("queued") == 1
        assert [key for key, _ in await handled(database_url, CONSUMER)] == [k for k, _ in dedup]

        # 3. A dry run over a claimable item.
        await _dry_run_never_pays(h, current, kafka_bootstrap, database_url, model)

        # The live group's offsets were never touched by any of the replays.
        assert (
            await committed_offsets(kafka_bootstrap, settings.topic_prefix + CONSUMER, topic)
            == live_offsets
        )


async def _dry_run_never_pays(
    h: Harness,
    current: Settings,
    kafka_bootstrap: str,
    database_url: str,
    model: ScriptedSynthesizer,
) -> None:
    """New items whose events are on the topic while no executor runs: a dry run reports their
    deliveries as wake-ups of waiting items but claims and calls nothing (its transaction only
    reads them), and afterwards the items are still queued, unclaimed, with no ledger row."""
    paid = model.total
    await h.commands.put_document(PROJECT, "backlog-2", backlog("Delta", "Epsilon", "Zeta"))
    await h.commands.generate_epic(GenerateEpic(PROJECT, "backlog-2", "E1"))
    async with relay_running(current, kafka_bootstrap, database_url):
        await _published(h.admin)
    # Due long ago: the executor's own sweep would claim it too, if it could write.
    await h.admin.execute(
        "UPDATE work.work_items SET not_before = now() - interval '1 hour' WHERE status = 'queued'"
    )
    state = await _state(h.admin)
    dedup = await handled(database_url, CONSUMER)
    with capture_logs() as logs:
        dry = await run_replay(
            current, _factory(current, model), ReplayRequest(Beginning(), mode=Mode.DRY_RUN)
        )
    # No sweep or claim ran (a replay starts no background work), so none was even attempted.
    assert not any(
        e["event"] in ("step failed; retrying", "outage started: waiting for the server")
        for e in logs
    )
    assert dry.complete
    assert not dry.committed
    # The deliveries of the new item and of step 2's (relayed meanwhile): wake-ups.
    assert dry.counts[Outcome.APPLIED] == 2
    assert dry.facts["waiting"] == 2
    changes = {c.table: c for c in dry.changes}
    assert "work.work_items" not in changes or changes["work.work_items"].updated == 0
    assert changes["core.event_handled"].inserted == 2
    await asyncio.sleep(0.5)  # anything the dry run might have started would show by now
    assert model.total == paid
    assert await _state(h.admin) == state
    assert await handled(database_url, CONSUMER) == dedup
    statuses = [r["status"] for r in await h.items()]
    assert statuses.count("queued") == 2  # this one and the one of step 2
