"""Both streams running for real on the cluster, under a steady load, with their progress sampled.

``pipeline(...)`` applies the topics (``spectral topics apply``: 3 partitions, replication 3,
``min.insync.replicas`` 2), starts the outbox relay, the ``rule-candidates`` consumer and the
``work-executor`` as ``spectral`` processes (the executor pays a fake OpenAI-compatible gateway
that counts every call), and offers a steady load from the test process:

* failure-cluster snapshots: every ``TICK`` seconds the next snapshot of ``SNAPSHOTS_PER_TICK``
  clusters (out of ``CLUSTERS``) is written to the outbox, each snapshot numbered by its
  ``failure_count``, so the projection must end with the highest number of every cluster;
* work: every ``WORK_EVERY`` seconds a document with ``EPICS`` epics and a generate-all command
  (one paid item per epic).

A sampler reads three counters from the database every ``SAMPLE`` seconds — outbox rows
published (the relay), dedup rows of ``rule-candidates`` (the consumer), work items applied (the
executor) — and :meth:`Pipeline.stall` measures, per stage, the longest time without progress
after a fault and when progress resumed. At the end, :meth:`Pipeline.finish` stops the load,
waits for everything offered to be applied, stops the processes with SIGTERM (each must exit 0)
and checks that every effect happened exactly once.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import Popen
from uuid import UUID

import asyncpg

from contracts import FAILURE_CLUSTER_DETECTED, WORK_ITEM_ENQUEUED
from producers.work.commands import GenerateAll, WorkCommands
from spectral.kafka.topics import dlq_topic, topic_for
from spectral.outbox.writer import OutboxItem, enqueue
from spectral.settings import Settings
from tests.cluster.support import kill_all, start_spectral, tail, terminate, wait_exit
from tests.fakes.openai_server import FakeModelServer
from tests.integration.outbox.relay.support import key_id, numbered
from tests.integration.work.support import PROJECT, backlog, harness
from tests.kafka_support import read_all

CLUSTERS = 30
SNAPSHOTS_PER_TICK = 6
TICK = 0.1
WORK_EVERY = 1.0
EPICS = 2
SAMPLE = 0.1
AFTER_SECONDS = 3.0
"""Load kept running after a fault once every stage progressed again."""
RECOVERY_SECONDS = 120.0
STAGES = ("relay", "rule-candidates", "work-executor")

_PROGRESS = """
SELECT (SELECT count(*) FROM core.outbox WHERE published_at IS NOT NULL),
       (SELECT count(*) FROM core.event_handled WHERE consumer = 'rule-candidates'),
       (SELECT count(*) FROM work.work_items WHERE status = 'applied')
"""


@dataclass(frozen=True)
class Stall:
    """Progress of one stage after a fault: the longest stretch without progress (from the
    fault or from a later progress), and how long after the fault that stretch ended."""

    stage: str
    longest: float
    resumed_after: float


@dataclass
class Offered:
    last_seq: dict[UUID, int] = field(default_factory=dict)
    keys: set[str] = field(default_factory=set)
    documents: int = 0


@dataclass
class Pipeline:
    settings: Settings
    database_url: str
    admin: asyncpg.Pool
    commands: WorkCommands
    model: FakeModelServer
    logs: dict[str, Path]
    processes: dict[str, Popen[bytes]] = field(default_factory=dict)
    offered: Offered = field(default_factory=Offered)
    samples: list[tuple[float, tuple[int, ...]]] = field(default_factory=list)
    _stop_load: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        assert self.settings.kafka_bootstrap is not None
        return self.settings.kafka_bootstrap

    @property
    def topics(self) -> list[str]:
        prefix = self.settings.topic_prefix
        return [topic_for(FAILURE_CLUSTER_DETECTED, prefix), topic_for(WORK_ITEM_ENQUEUED, prefix)]

    # -- load and sampling ----------------------------------------------------------------

    async def _snapshots(self) -> None:
        ring = itertools.cycle(range(CLUSTERS))
        async with self.admin.acquire() as conn:
            while not self._stop_load.is_set():
                items = []
                for _ in range(SNAPSHOTS_PER_TICK):
                    key = key_id(next(ring))
                    seq = self.offered.last_seq.get(key, 0) + 1
                    envelope = numbered(key, seq)
                    items.append(OutboxItem(envelope, str(key)))
                    self.offered.last_seq[key] = seq
                    self.offered.keys.add(envelope.idempotency_key)
                async with conn.transaction():
                    await enqueue(conn, items)
                await asyncio.sleep(TICK)

    async def _work(self) -> None:
        while not self._stop_load.is_set():
            n = self.offered.documents + 1
            document = f"doc-{n}"
            titles = [f"Epic {n}.{e}" for e in range(1, EPICS + 1)]
            await self.commands.put_document(PROJECT, document, backlog(*titles))
            await self.commands.generate_all(GenerateAll(PROJECT, document))
            self.offered.documents = n
            await asyncio.sleep(WORK_EVERY)

    async def _sample(self) -> None:
        async with self.admin.acquire() as conn:
            while True:
                row = await conn.fetchrow(_PROGRESS)
                assert row is not None
                self.samples.append((time.monotonic(), tuple(int(v) for v in row)))
                await asyncio.sleep(SAMPLE)

    def start_load(self) -> None:
        self._tasks = [
            asyncio.create_task(self._snapshots()),
            asyncio.create_task(self._work()),
            asyncio.create_task(self._sample()),
        ]

    async def stop_load(self) -> None:
        self._stop_load.set()
        await asyncio.gather(*self._tasks[:2])

    def _check_tasks(self) -> None:
        for task in self._tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise AssertionError("the load or the sampler failed") from task.exception()

    # -- progress ---------------------------------------------------------------------------

    def progressed_since(self, since: float) -> set[str]:
        """The stages whose counter grew after ``since``."""
        if not self.samples:
            return set()
        before = [s for t, s in self.samples if t <= since]
        base = before[-1] if before else (0,) * len(STAGES)
        latest = self.samples[-1][1]
        return {stage for i, stage in enumerate(STAGES) if latest[i] > base[i]}

    async def progressing(self, since: float, timeout: float, what: str) -> None:
        """Wait until every stage progressed after ``since``."""
        deadline = time.monotonic() + timeout
        while (done := self.progressed_since(since)) != set(STAGES):
            self._check_tasks()
            self._check_processes()
            assert time.monotonic() < deadline, (
                f"{what}: no progress of {sorted(set(STAGES) - done)} within {timeout}s"
            )
            await asyncio.sleep(SAMPLE)

    async def recovered(self, fault_at: float, since: float, what: str) -> list[Stall]:
        """Wait until every stage progressed after ``since``, keep the load running
        ``AFTER_SECONDS`` more, and measure the stall from ``fault_at``."""
        await self.progressing(since, RECOVERY_SECONDS, what)
        await asyncio.sleep(AFTER_SECONDS)
        return self.stall(fault_at, time.monotonic())

    def stall(self, since: float, until: float) -> list[Stall]:
        """Per stage, the longest stretch without progress in [since, until]."""
        out = []
        for i, stage in enumerate(STAGES):
            moments = [since]
            previous = None
            for t, values in self.samples:
                if previous is not None and values[i] > previous and since < t <= until:
                    moments.append(t)
                previous = values[i]
            moments.append(until)
            gaps = [(b - a, b) for a, b in itertools.pairwise(moments)]
            longest, ended = max(gaps)
            out.append(Stall(stage, round(longest, 2), round(ended - since, 2)))
        return out

    def _check_processes(self) -> None:
        for name, process in self.processes.items():
            assert process.poll() is None, (
                f"{name} exited {process.returncode}:\n{tail(self.logs[name])}"
            )

    # -- the end ------------------------------------------------------------------------------

    async def finish(self, timeout: float = 120.0) -> None:
        """Stop the load, wait until everything offered is applied, stop the processes, check
        exactly-once."""
        await self.stop_load()
        items = self.offered.documents * EPICS
        deadline = time.monotonic() + timeout
        while True:
            self._check_processes()
            row = await self.admin.fetchrow(
                "SELECT (SELECT count(*) FROM core.outbox WHERE published_at IS NULL)"
                "   AS unpublished,"
                " (SELECT count(*) FROM core.event_handled WHERE consumer = 'rule-candidates')"
                "   AS handled,"
                " (SELECT count(*) FROM work.work_items WHERE status IN ('applied', 'dead_letter'))"
                "   AS terminal,"
                " (SELECT count(*) FROM work.threads WHERE status IN ('open', 'running')) AS live"
            )
            assert row is not None
            if (
                row["unpublished"] == 0
                and row["handled"] >= len(self.offered.keys)
                and row["terminal"] == items
                and row["live"] == 0
            ):
                break
            assert time.monotonic() < deadline, f"not drained after {timeout}s: {dict(row)}"
            await asyncio.sleep(0.2)
        for name, process in self.processes.items():
            assert await terminate(process) == 0, f"{name}:\n{tail(self.logs[name])}"
        await self.check_exactly_once()

    async def check_exactly_once(self) -> None:
        handled = await self.admin.fetch(
            "SELECT idempotency_key, outcome FROM core.event_handled_keys "
            "WHERE consumer = 'rule-candidates'"
        )
        keys = Counter(r["idempotency_key"] for r in handled)
        assert set(keys) == self.offered.keys, "a snapshot was lost or invented"
        projected = await self.admin.fetch(
            "SELECT cluster_id, failure_count FROM platform.rule_candidates_pending"
        )
        assert {r["cluster_id"]: r["failure_count"] for r in projected} == self.offered.last_seq

        items = await self.admin.fetch("SELECT work_item_id, status FROM work.work_items")
        assert len(items) == self.offered.documents * EPICS
        assert {r["status"] for r in items} == {"applied"}
        per_item = await self.admin.fetch(
            "SELECT work_item_id, count(*) FILTER (WHERE entry_type = 'prompt') AS prompts,"
            " count(*) FILTER (WHERE entry_type = 'response') AS responses,"
            " count(*) FILTER (WHERE entry_type = 'error') AS errors"
            " FROM work.ledger_entries WHERE work_item_id IS NOT NULL GROUP BY work_item_id"
        )
        assert len(per_item) == len(items)
        assert {(r["prompts"], r["responses"], r["errors"]) for r in per_item} == {(1, 1, 0)}
        mutations = await self.admin.fetchval("SELECT count(*) FROM work.mutations")
        assert mutations == len(items)
        calls = self.model.snapshot()
        paid = Counter(c.item for c in calls)
        assert set(paid) == {str(r["work_item_id"]) for r in items}
        assert set(paid.values()) == {1}, "an item was paid for more than once"

        for topic in self.topics:
            assert await read_all(self.bootstrap, dlq_topic(topic), timeout=30) == []


def _executor_env(env: dict[str, str], model: FakeModelServer) -> dict[str, str]:
    return {
        **env,
        "SPECTRAL_SYNTHESIZER": "openai",
        "SPECTRAL_LLM_BASE_URL": model.url,
        "SPECTRAL_LLM_API_KEY": "sk-cluster-test",
        "SPECTRAL_LLM_ROUTES": json.dumps({"*": "fake-model"}),
    }


@asynccontextmanager
async def pipeline(
    settings: Settings, database_url: str, env: dict[str, str], logs_dir: Path
) -> AsyncIterator[Pipeline]:
    """The pipeline with its load running and every stage progressing."""
    topics_log = logs_dir / "topics.log"
    topics = start_spectral(env, topics_log, "topics", "apply")
    assert await wait_exit(topics, 90) == 0, tail(topics_log)
    with FakeModelServer() as model:
        async with harness(database_url) as h:
            logs = {stage: logs_dir / f"{stage}.log" for stage in STAGES}
            line = Pipeline(settings, database_url, h.admin, h.commands, model, logs)
            commands = {
                "relay": (env, ("outbox", "relay", "--poll-interval", "0.05")),
                "rule-candidates": (env, ("consume", "rule-candidates")),
                "work-executor": (_executor_env(env, model), ("consume", "work-executor")),
            }
            try:
                for stage, (stage_env, args) in commands.items():
                    line.processes[stage] = start_spectral(stage_env, logs[stage], *args)
                line.start_load()
                await line.progressing(time.monotonic(), RECOVERY_SECONDS, "start-up")
                yield line
            finally:
                kill_all(list(line.processes.values()))
                line._stop_load.set()
                for task in line._tasks:
                    task.cancel()
                    with suppress(asyncio.CancelledError, Exception):
                        await task


def report(fault: str, stalls: list[Stall], baseline: list[Stall]) -> str:
    """One line for the test output: the stall of each stage, and its usual pause."""
    parts = [
        f"{s.stage} {s.longest:.1f}s (resumed {s.resumed_after:.1f}s after; "
        f"normal pause {b.longest:.1f}s)"
        for s, b in zip(stalls, baseline, strict=True)
    ]
    return f"STALL {fault}: " + ", ".join(parts)
