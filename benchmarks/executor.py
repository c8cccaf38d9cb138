"""Figure 4: work-executor throughput (items/s) with the stub synthesizer, against a baseline.

Set-up (each side on a fresh database of its own): ``projects`` story backlogs of ``epics``
epics each, one ``generate-all`` command per backlog — so one work item per epic, every item
a ``story_generate`` call of the deterministic ``StubSynthesizer`` (no sleep, never fails)
followed by its ledger entries, the document mutation under the target lock and the parent's
settlement, exactly as in production.

* executor: the ``work-executor`` deployment as ``spectral consume`` runs it (the engine on the
  ``work.item.enqueued`` topic, whose deliveries wake the fair claims of the bounded pool of
  ``work_pool_size`` items in flight, which runs the claimed items in batches through
  ``WorkExecutor.run_batch``), in this process; the items' events are published from the
  outbox rows the commands wrote. Timed from the first delivery (the first dedup row) or the
  first start, whichever came first, to the last item's ``finished_at``, both on the database
  clock.
* baseline: the same code (``WorkExecutor.run_item``, which is ``run_batch`` with a batch of
  one) driven the way a typical queue worker is written — claim one due item per transaction
  (the executor's own claim, for one item), run it, repeat. Same database clock window.

Both stop by themselves: the executor once every item is terminal, the baseline when no item
is left; each is bounded by the run's time budget (``Options.limit``).
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
from consumers.work_executor.claims import ClaimRepository
from consumers.work_executor.deployment import build
from consumers.work_executor.executor import ExecutorConfig, WorkExecutor
from consumers.work_executor.handler import ROLE
from consumers.work_executor.metrics import ExecutorMetrics
from consumers.work_executor.retry import RetryStrategy
from consumers.work_executor.store import Store
from contracts import WORK_ITEM_ENQUEUED
from producers.work.commands import GenerateAll, WorkCommands
from producers.work.domain.functions import installed_functions
from producers.work.domain.settings import WorkSettings
from spectral.db.connect import create_pool
from spectral.engine.engine import ConsumerEngine, EngineOptions
from spectral.llm.limits import ProviderLimits
from spectral.llm.stub import StubSynthesizer
from spectral.settings import Settings, load_settings

_TERMINAL = "SELECT count(*) FROM work.work_items WHERE status IN ('applied', 'dead_letter')"
_WINDOW = """
SELECT least((SELECT min(handled_at) FROM core.event_handled WHERE consumer = 'work-executor'),
             min(started_at)) AS first,
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
    """One item claimed per transaction (the executor's own claim statement, LIMIT 1), run
    inline by the executor's own code as a batch of one, until no item is left. No sweeper, no
    pool."""
    settings = _settings(stack)
    pool = await create_pool(
        database_url, role=ROLE, min_size=1, max_size=WorkSettings.of(settings).work_pool_size + 2
    )
    functions = installed_functions()
    repository = Store.over(pool, functions)
    claims = ClaimRepository(pool, resolve=lambda _f, _o: None, limits=ProviderLimits())
    executor = WorkExecutor(
        repository,
        StubSynthesizer(),
        RetryStrategy.from_settings(settings),
        ExecutorMetrics(CollectorRegistry()),
        ExecutorConfig(
            worker_id="baseline",
            lease_timeout_seconds=WorkSettings.of(settings).work_lease_timeout_seconds,
        ),
        functions=functions,
    )
    deadline = time.monotonic() + limit
    try:
        while time.monotonic() < deadline:
            claimed = await claims.claim(1, uuid4(), "baseline")
            if not claimed.jobs:
                break
            await executor.run_item(*claimed.jobs[0])
    finally:
        await pool.close()
    start, end, applied, dead = await _window(database_url, executor=False)
    return ItemsRun(items, applied, dead, (end - start).total_seconds())


async def run_executor(stack: BenchStack, options: Options, report: Report) -> None:
    epics = options.executor_epics
    deployed_db = await stack.database("executor")
    deployed_items = await _seed(deployed_db, options.executor_items // epics, epics)
    baseline_db = await stack.database("executor_baseline")
    baseline_items = await _seed(baseline_db, options.executor_baseline_items // epics, epics)

    deployed = await run_deployment(stack, deployed_db, deployed_items, options.limit())
    baseline = await run_baseline(stack, baseline_db, baseline_items, options.limit())
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
        "(deliveries wake fair claims of the pool's room, batches of the items in flight)",
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
