"""The whole path on the real broker: command -> outbox -> relay -> Kafka -> work-executor
(the deployment's own ``build``) -> ledger, documents, threads."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from consumers.work_executor.deployment import build
from producers.work.commands import GenerateAll, GenerateEpic
from spectral.settings import Settings
from tests.integration.work.kafka_support import (
    create_work_topic,
    engine_running,
    relay_running,
    settled,
)
from tests.integration.work.support import (
    DOCUMENT,
    PROJECT,
    ScriptedSynthesizer,
    backlog,
    executor,
    executor_settings,
    harness,
)

pytestmark = pytest.mark.integration


async def test_commands_reach_the_executor_through_the_outbox_and_kafka(
    database_url: str, settings: Settings, kafka_bootstrap: str
) -> None:
    await create_work_topic(kafka_bootstrap, settings.topic_prefix)
    # A retry 2 s out: its outbox row is written well before it comes due, however slow the
    # machine (0.2 s could pass before the failed attempt's transaction wrote the row).
    current = executor_settings(settings, work_retry_base_seconds=2.0)
    model = ScriptedSynthesizer()
    registry = CollectorRegistry()
    handler = build(current, database_url, registry, synthesizer=model)
    async with harness(database_url) as h:
        await h.commands.put_document(
            PROJECT, DOCUMENT, backlog("Alpha", "Beta [transient:1]", "Gamma [permanent]")
        )
        results = await asyncio.gather(
            *(h.commands.generate_epic(GenerateEpic(PROJECT, DOCUMENT, "E1")) for _ in range(3))
        )
        assert len({r.thread_id for r in results}) == 1
        parent = await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT))
        async with (
            relay_running(current, kafka_bootstrap, database_url),
            engine_running(handler, current, kafka_bootstrap, database_url, "work-executor"),
        ):
            await settled(h.admin)
        statuses = {
            r["epic"]: (r["status"], r["attempt"])
            for r in await h.admin.fetch(
                "SELECT input->>'epic_id' AS epic, status, attempt FROM work.work_items"
            )
        }
        assert statuses == {
            "E1": ("applied", 1),
            "E2": ("applied", 2),
            "E3": ("dead_letter", 1),
        }
        assert model.total == 4
        assert set(model.keys.values()) == {1}  # never two calls under one attempt key
        assert await h.thread_status(parent.thread_id) == "failed"  # E3 failed; E1, E2 did not
        # Every delivery was a wake-up (applied: its item was still waiting) or came after the
        # claims had taken its item (stale) — including the retry's, delivered by its delayed
        # outbox row when it came due.
        handled = await _handled(h.admin, 4)
        assert {r["outcome"] for r in handled} <= {"applied", "stale"}
        retry = await h.admin.fetchrow(
            "SELECT available_at, published_at, created_at FROM core.outbox "
            "WHERE event_type = 'work.item.enqueued' AND idempotency_key LIKE '%:2'"
        )
        assert retry is not None
        assert retry["published_at"] >= retry["available_at"] > retry["created_at"]
        history = await h.history()
        assert history.consistent
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for metric in registry.collect()
            for s in metric.samples
        }
        assert samples[("synthesis_attempts_total", (("outcome", "success"),))] == 2
        assert samples[("synthesis_attempts_total", (("outcome", "transient_failure"),))] == 1
        assert samples[("synthesis_attempts_total", (("outcome", "permanent_failure"),))] == 1
        assert samples[("synthesis_failures_total", (("reason", "synthesizer"),))] == 2
        assert samples[("work_dead_letters_total", (("reason", "permanent_failure"),))] == 1
        assert samples[("synthesis_duration_seconds_count", ())] == 4


async def _handled(admin: asyncpg.Pool, count: int, timeout: float = 30.0) -> list[Any]:
    """The executor's dedup rows, once there are ``count`` of them."""
    deadline = time.monotonic() + timeout
    while True:
        rows = await admin.fetch(
            "SELECT idempotency_key, outcome FROM core.event_handled_keys "
            "WHERE consumer = 'work-executor' ORDER BY handled_at"
        )
        if len(rows) >= count or time.monotonic() > deadline:
            assert len(rows) == count, rows
            return list(rows)
        await asyncio.sleep(0.1)


async def test_two_replicas_and_their_sweeps_racing_pay_once_per_item(
    database_url: str, settings: Settings, kafka_bootstrap: str
) -> None:
    """Two executor replicas of one consumer group, each also sweeping the table every 50 ms
    with no grace: deliveries and sweeps of both race for the same items, and the lease lets
    exactly one of them pay per item (a delivery that loses is recorded as stale)."""
    await create_work_topic(kafka_bootstrap, settings.topic_prefix)
    current = executor_settings(settings, work_sweep_interval_seconds=0.05)
    model = ScriptedSynthesizer()
    async with harness(database_url) as h:
        await h.commands.put_document(
            PROJECT, DOCUMENT, backlog(*(f"Epic {n} [slow:0.2]" for n in range(8)))
        )
        await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT))
        async with (
            executor(current, database_url, model, worker="one") as one,
            executor(current, database_url, model, worker="two") as two,
            relay_running(current, kafka_bootstrap, database_url),
            engine_running(one, current, kafka_bootstrap, database_url, "work-executor"),
            engine_running(two, current, kafka_bootstrap, database_url, "work-executor"),
        ):
            await settled(h.admin)
        assert {r["status"] for r in await h.items()} == {"applied"}
        assert model.total == 8
        assert set(model.items.values()) == {1}
        handled = await _handled(h.admin, 8)  # each event once, applied (a wake-up) or stale
        assert {r["outcome"] for r in handled} <= {"applied", "stale"}
        history = await h.history()
        assert history.consistent
        assert all(item.paid_calls == 1 for item in history.items.values())
