"""Figure 4: work-executor throughput (items/s) with the stub synthesizer, against a baseline.

Set-up (each side on a fresh database of its own): ``projects`` story backlogs of ``epics``
epics each, one ``generate-all`` command per backlog — so one work item per epic, every item
a ``story_generate`` call of the deterministic ``StubSynthesizer`` (no sleep, never fails)
followed by its ledger entries, the document mutation under the target lock and the parent's
settlement, exactly as in production.

* executor: the ``work-executor`` deployment as ``spectral consume`` runs it (the engine on the
  ``work.item.enqueued`` topic, claims in the engine's batch transaction, the bounded worker
  pool of ``work_pool_size`` workers), in this process; the items' events are published from
  the outbox rows the commands wrote. Timed from the first claim (the first dedup row) to the
  last item's ``finished_at``, both on the database clock.
* baseline: the same per-item code (``WorkExecutor.run_item``) driven the way a typical queue
  worker is written — claim one due item per transaction (the same conditional claim, LIMIT 1,
  SKIP LOCKED), run it, repeat. Same database clock window.

Both stop by themselves: the executor once every item is terminal, the baseline when no item
is left; each is bounded by ``stage_timeout``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import uuid4

import asyncpg
from prometheus_client import CollectorRegistry

from benchmarks.options import Options
from benchmarks.publish import publish_pairs
from benchmarks.report import Report
from benchmarks.stack import BenchStack
from consumers.work_executor import build
from contracts import WORK_ITEM_ENQUEUED
from producers.work.commands import GenerateAll, WorkCommands
from spectral.consumer.engine import ConsumerEngine, EngineOptions
from spectral.db.connect import create_pool
from spectral.llm.stub import StubSynthesizer
from spectral.settings import Settings, load_settings

_TERMINAL = "SELECT count(*) FROM work.work_items WHERE status IN ('applied', 'dead_letter')"
_WINDOW = """
SELECT (SELECT min(handled_at) FROM core.event_handled WHERE consumer = 'work-executor') AS first,
       min(started_at) AS started, max(finished_at) AS finished,
       count(*) FILTER (WHERE status = 'applied') AS applied,
       count(*) FILTER (WHERE status = 'dead_letter') AS dead
FROM work.work_items
"""


@dataclass(frozen=True)
class ItemsRun:
    items: int
    applied: int
    dead: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.items / self.seconds if self.seconds > 0 else 0.0


def _backlog(project: int, epics: int) -> dict[str, Any]:
    return {
        "title": f"Shop {project}",
        "epics": {
            f"E{n}": {
                "title": f"Checkout step {n} for storefront {project}",
                "description": "Customers pay with saved cards; receipts by e-mail.",
            }
            for n in range(1, epics + 1)
        },
    }


async def _seed(database_url: str, projects: int, epics: int) -> int:
    """Backlogs and one generate-all per backlog; returns the number of work items."""
    pool = await create_pool(database_url, role="spectral_producer", max_size=4)
    try:
        commands = WorkCommands(pool)
        for project in range(projects):
            project_id, document_id = f"proj-{project}", f"backlog-{project}"
            await commands.put_document(project_id, document_id, _backlog(project, epics))
            await commands.generate_all(GenerateAll(project_id, document_id))
        count: int = await pool.fetchval("SELECT count(*) FROM work.work_items")
    finally:
        await pool.close()
    return count


def _settings(stack: BenchStack) -> Settings:
    # The sweep (stale leases, due items no event brought) keeps its production interval: in a
    # run this short it finds nothing to do, and the deliveries claim every item.
    return load_settings(topic_prefix=stack.topic_prefix, synthesizer="stub")


async def _window(database_url: str, *, executor: bool) -> tuple[datetime, datetime, int, int]:
    conn = await asyncpg.connect(database_url)
    try:
        row = await conn.fetchrow(_WINDOW)
    finally:
        await conn.close()
    assert row is not None
    start = row["first"] if executor and row["first"] is not None else row["started"]
    return start, row["finished"], row["applied"], row["dead"]


async def _wait_terminal(database_url: str, items: int, limit_seconds: float) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        deadline = time.monotonic() + limit_seconds
        while time.monotonic() < deadline:
            if await conn.fetchval(_TERMINAL) >= items:
                return
            await asyncio.sleep(0.2)
    finally:
        await conn.close()


async def run_deployment(
    stack: BenchStack, database_url: str, items: int, limit: float
) -> ItemsRun:
    """The work-executor deployment on Kafka (in this process) until every item is terminal."""
    topic = stack.topic_prefix + WORK_ITEM_ENQUEUED
    await stack.create_topic(topic, 3)
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT record_key, envelope FROM core.outbox WHERE event_type = $1 ORDER BY id",
            WORK_ITEM_ENQUEUED,
        )
    finally:
        await conn.close()
    await publish_pairs(
        stack.endpoints.kafka_bootstrap,
        topic,
        [(r["record_key"].encode(), r["envelope"]) for r in rows],
    )
    settings = _settings(stack)
    registry = CollectorRegistry()
    handler = build(settings, database_url, registry, synthesizer=StubSynthesizer())
    engine = ConsumerEngine(
        handler,
        settings,
        kafka_bootstrap=stack.endpoints.kafka_bootstrap,
        database_url=database_url,
        options=EngineOptions(group=f"bench-{stack.run_id}-executor"),
        registry=registry,
    )
    task = asyncio.create_task(engine.run())
    try:
        await _wait_terminal(database_url, items, limit)
    finally:
        engine.stop()
        await asyncio.wait_for(task, timeout=60)
        await handler.aclose()
    start, end, applied, dead = await _window(database_url, executor=True)
    return ItemsRun(items, applied, dead, (end - start).total_seconds())


async def run_baseline(stack: BenchStack, database_url: str, items: int, limit: float) -> ItemsRun:
    """One item claimed per transaction, run inline, until no item is left."""
    settings = _settings(stack)
    handler = build(settings, database_url, CollectorRegistry(), synthesizer=StubSynthesizer())
    executor = await handler.start()
    pool = await create_pool(database_url, role="spectral_executor", max_size=1)
    claim = (
        "WITH candidate AS (SELECT work_item_id FROM work.work_items "
        "WHERE status IN ('queued', 'failed') AND not_before <= now() "
        "ORDER BY not_before, work_item_id LIMIT 1 FOR UPDATE SKIP LOCKED) "
        "UPDATE work.work_items w SET status = 'claimed', lease_token = $1, leased_at = now(), "
        "leased_by = $2 FROM candidate c WHERE w.work_item_id = c.work_item_id "
        "RETURNING w.work_item_id"
    )
    deadline = time.monotonic() + limit
    try:
        while time.monotonic() < deadline:
            token = uuid4()
            async with pool.acquire() as conn, conn.transaction():
                item_id = await conn.fetchval(claim, token, "baseline")
            if item_id is None:
                break
            await executor.run_item(item_id, token)
    finally:
        await pool.close()
        await handler.aclose()
    start, end, applied, dead = await _window(database_url, executor=False)
    return ItemsRun(items, applied, dead, (end - start).total_seconds())


async def run_executor(stack: BenchStack, options: Options, report: Report) -> None:
    epics = options.executor_epics
    deployed_db = await stack.database("executor")
    deployed_items = await _seed(deployed_db, options.executor_items // epics, epics)
    baseline_db = await stack.database("executor_baseline")
    baseline_items = await _seed(baseline_db, options.executor_baseline_items // epics, epics)

    deployed = await run_deployment(stack, deployed_db, deployed_items, options.stage_timeout)
    baseline = await run_baseline(stack, baseline_db, baseline_items, options.stage_timeout)
    for label, run in (("executor", deployed), ("baseline", baseline)):
        report.check(
            f"{label}: every work item applied once",
            run.applied == run.items and run.dead == 0,
            f"{run.applied:,} applied, {run.dead} dead-lettered of {run.items:,}",
        )
    report.add(
        "executor_throughput",
        deployed.per_second,
        "items/s",
        f"{deployed.items:,} items, stub synthesizer, work-executor deployment on Kafka "
        "(batch claims in the engine transaction, worker pool)",
    )
    report.add(
        "executor_baseline",
        baseline.per_second,
        "items/s",
        f"{baseline.items:,} items, one item claimed per transaction and run inline",
    )
    ratio = deployed.per_second / baseline.per_second if baseline.per_second else 0.0
    report.add("executor_vs_baseline", ratio, "x")
    report.target("executor / baseline", ratio, ">= 4x", ratio >= 4)
