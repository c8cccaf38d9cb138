"""Figure 5: durable work at production scale — the work executor against a provider that has
latency, a concurrency cap and a rate limit (benchmarks/gateway.py, its own process on
loopback), as ``spectral consume work-executor`` runs it (its own process: its RSS is sampled).

Latency is lognormal with a median of ``latency_median`` seconds and a 99th percentile 6 x that
(1 s / 6 s: the unit is not scaled). The gateway runs ``concurrency`` calls at once and starts
``rate`` calls per second (429 beyond either); the executor is configured with the same limits
for its model route (and ``max_tokens``, prices), its pool twice the concurrency.

1. **Throughput and fairness.** A big tenant (org ``big``: ``big_items`` items, generate-alls of
   10 epics) saturates the gateway. Over ``window`` seconds of that steady state: answered calls
   per second against the gateway's limit (concurrency / mean latency of the calls answered in
   the window). Then a small tenant (org ``small``: ``small_items`` items) submits: the p99 of
   its time-to-start (its item's creation to its first paid call's prompt entry, database clock)
   against twice the mean call latency. Then the big tenant's threads are all canceled (the
   items waiting end without a call; those in flight record their answers).
2. **A budget.** Org ``capped`` submits ``capped_items`` items with a cost budget of half their
   cost (the gateway's usage per call is fixed, so the workload's cost is known). What it spent
   (settled usage plus reservations outstanding) must not exceed the budget — nor may what the
   gateway answered for it — and every item must be applied or parked (none failed). Raising the
   budget then resumes the parked items to the end.

Checks in every run: no Idempotency-Key (one attempt of one item) was called twice; the RSS of
the executor stays flat (the median of its last quarter against its first).
"""

from __future__ import annotations

import asyncio
import json
import math
import signal
import socket
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from benchmarks.options import Options
from benchmarks.processes import spectral_executable, vm_rss_kib
from benchmarks.report import Report
from benchmarks.stack import BenchStack
from contracts import WORK_ITEM_ENQUEUED
from producers.work.budgets import BudgetCommands
from producers.work.cancel import cancel_thread
from producers.work.commands import GenerateAll, WorkCommands
from producers.work.domain.budgets import Period
from spectral.db.connect import create_pool

MODEL = "bench-model"
PROMPT_PRICE = Decimal("0.15")
COMPLETION_PRICE = Decimal("0.60")
EPICS = 10
_KIB = 1024


@dataclass
class Gauge:
    """RSS of the executor, every half second."""

    pid: int
    samples: list[tuple[float, int]] = field(default_factory=list)
    steady_from: float | None = None
    """Growth is measured from here (the start-up's imports and pools are not growth)."""

    def steady(self) -> None:
        self.steady_from = time.monotonic()

    async def run(self) -> None:
        status = Path(f"/proc/{self.pid}/status")
        while True:
            kib = vm_rss_kib(status)
            if kib is None:
                return
            self.samples.append((time.monotonic(), kib))
            await asyncio.sleep(0.5)

    def steady_samples(self) -> list[int]:
        return [k for at, k in self.samples if self.steady_from is None or at >= self.steady_from]

    def growth_mib(self) -> float:
        """Median RSS of the steady window's last quarter minus that of its third: the first
        half still warms up. The heap grows to its working set over the first 50-90 s of calls
        (measured: a 240 s window's quarters 86 / 92 / 92 / 93 MiB, a 180 s one's under load
        79 / 87 / 93 / 93, the Python heap flat at 37-39 MiB by tracemalloc meanwhile); after
        that the RSS must stay put. A leak keeps growing through the second half (a young GC
        threshold of 200,000 measured 87 / 101 / 115 / 123 MiB: 8 here)."""
        quarters = self.quarters_mib()
        if len(quarters) < 4:
            return 0.0
        return quarters[3] - quarters[2]

    def quarters_mib(self) -> list[float]:
        """Median RSS of each quarter of the steady window."""
        samples = self.steady_samples()
        size = max(len(samples) // 4, 1)
        return [
            statistics.median(samples[n * size : (n + 1) * size]) / _KIB
            for n in range(4)
            if samples[n * size : (n + 1) * size]
        ]

    def peak_mib(self) -> float:
        return max((k for _, k in self.samples), default=0) / _KIB


def _backlog(name: str) -> dict[str, Any]:
    return {
        "title": f"Shop {name}",
        "epics": {
            f"E{n}": {
                "title": f"Checkout step {n} of {name}",
                "description": "Customers pay with saved cards; receipts by e-mail.",
            }
            for n in range(1, EPICS + 1)
        },
    }


async def _submit(commands: WorkCommands, org: str, documents: int, parallel: int = 8) -> list[Any]:
    """``documents`` backlogs of 10 epics for ``org``, one generate-all each; their threads."""
    gate = asyncio.Semaphore(parallel)

    async def one(n: int) -> Any:
        async with gate:
            project, document = f"{org}-p{n}", f"{org}-d{n}"
            await commands.put_document(project, document, _backlog(document))
            result = await commands.generate_all(GenerateAll(project, document, org_id=org))
            return result.thread_id

    return list(await asyncio.gather(*(one(n) for n in range(documents))))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _until(what: str, check: Any, limit: float, interval: float = 0.2) -> float:
    started = time.monotonic()
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return time.monotonic() - started
        if time.monotonic() - started > limit:
            raise TimeoutError(f"{what}: not within {limit:.0f} s")
        await asyncio.sleep(interval)


def _executor_env(
    stack: BenchStack, database_url: str, port: int, options: Options, journal: Path
) -> dict[str, str]:
    limits = {
        MODEL: {
            "concurrency": options.governance_concurrency,
            "rpm": int(options.governance_rate * 60),
            "max_tokens": 300,
            "prompt_price": str(PROMPT_PRICE),
            "completion_price": str(COMPLETION_PRICE),
        }
    }
    return {
        **stack.env(database_url),
        "SPECTRAL_LOG_LEVEL": "WARNING",
        "SPECTRAL_SYNTHESIZER": "openai",
        "SPECTRAL_LLM_BASE_URL": f"http://127.0.0.1:{port}/v1",
        "SPECTRAL_LLM_ROUTES": json.dumps({"*": MODEL}),
        "SPECTRAL_LLM_LIMITS": json.dumps(limits),
        "SPECTRAL_WORK_POOL_SIZE": str(2 * options.governance_concurrency),
        "SPECTRAL_WORK_CLAIM_POLL_SECONDS": "0.2",
        "SPECTRAL_WORK_JOURNAL_DIR": str(journal),
        "SPECTRAL_WORK_METRIC_ORGS": json.dumps(["big", "small", "capped"]),
    }


@dataclass
class Phase:
    """What the run measured."""

    window: tuple[float, float] = (0.0, 0.0)
    tts: list[float] = field(default_factory=list)
    canceled: int = 0
    budget: Decimal = Decimal(0)
    spent: Decimal = Decimal(0)
    parked: int = 0
    capped_applied: int = 0
    capped_answered: int = 0
    resumed: int = 0
    notes: list[str] = field(default_factory=list)


@dataclass
class _Run:
    admin: asyncpg.Connection
    commands: WorkCommands
    producer: asyncpg.Pool
    options: Options
    phase: Phase
    http: httpx.AsyncClient
    port: int
    gauge: Gauge

    async def stats(self) -> dict[str, Any]:
        answer: dict[str, Any] = (await self.http.get(f"http://127.0.0.1:{self.port}/stats")).json()
        return answer


async def run_governance(stack: BenchStack, options: Options, report: Report) -> None:
    database_url = await stack.database("governance")
    await stack.create_topic(stack.topic_prefix + WORK_ITEM_ENQUEUED, 3)
    port = _free_port()
    gateway = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "benchmarks.gateway",
        "--port",
        str(port),
        "--concurrency",
        str(options.governance_concurrency),
        "--rate",
        str(options.governance_rate),
        "--median",
        str(options.governance_latency),
        "--p99",
        str(6 * options.governance_latency),
    )
    producer = await create_pool(database_url, role="spectral_producer", max_size=10)
    admin = await asyncpg.connect(database_url)
    phase = Phase()
    stats: dict[str, Any] = {}
    gauge: Gauge | None = None
    executor: asyncio.subprocess.Process | None = None
    try:
        async with httpx.AsyncClient() as http:
            await _until("the gateway answers", lambda: _answers(http, port), 20)
            commands = WorkCommands(producer)
            big = await _submit(commands, "big", options.governance_big_items // EPICS)
            with tempfile.TemporaryDirectory(prefix="bench-journal-") as journal:
                executor = await asyncio.create_subprocess_exec(
                    spectral_executable(),
                    "consume",
                    "work-executor",
                    env=_executor_env(stack, database_url, port, options, Path(journal)),
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.DEVNULL,
                )
                gauge = Gauge(executor.pid)
                sampling = asyncio.create_task(gauge.run())
                run = _Run(admin, commands, producer, options, phase, http, port, gauge)
                try:
                    await _fairness(run, big)
                    await _budget(run)
                finally:
                    executor.send_signal(signal.SIGTERM)
                    await asyncio.wait_for(executor.wait(), timeout=120)
                    sampling.cancel()
            stats = (await http.get(f"http://127.0.0.1:{port}/stats")).json()
    finally:
        if executor is not None and executor.returncode is None:
            executor.kill()
        gateway.send_signal(signal.SIGTERM)
        await gateway.wait()
        await admin.close()
        await producer.close()
    _report(report, options, phase, stats, gauge, executor)


async def _answers(http: httpx.AsyncClient, port: int) -> bool:
    try:
        return (await http.get(f"http://127.0.0.1:{port}/stats")).status_code == 200
    except httpx.HTTPError:
        return False


async def _fairness(run: _Run, big: list[Any]) -> None:
    admin, options, phase = run.admin, run.options, run.phase
    concurrency = options.governance_concurrency

    async def answered() -> int:
        return len((await run.stats())["answered"])

    await _until(
        "the big tenant saturates the gateway", lambda: _ge(answered(), 2 * concurrency), 120
    )
    run.gauge.steady()
    start = time.time()
    await asyncio.sleep(options.governance_window)
    phase.window = (start, time.time())
    await _submit(run.commands, "small", options.governance_small_items // EPICS)
    await _until(
        "every item of the small tenant started",
        lambda: _ge(_started(admin, "small"), options.governance_small_items),
        120,
        interval=0.1,
    )
    rows = await admin.fetch(
        """SELECT extract(epoch FROM min(l.created_at) - w.created_at)::float8 AS tts
           FROM work.work_items w JOIN work.ledger_entries l USING (work_item_id)
           WHERE w.org_id = 'small' AND l.entry_type = 'prompt'
           GROUP BY w.work_item_id, w.created_at"""
    )
    phase.tts = sorted(r["tts"] for r in rows)
    gate = asyncio.Semaphore(8)

    async def cancel(thread_id: Any) -> int:
        async with gate:
            result = await cancel_thread(run.producer, thread_id, reason="benchmark over")
            return result.canceled_items

    phase.canceled = sum(await asyncio.gather(*(cancel(t) for t in big)))
    await _until(
        "the big tenant's items ended",
        lambda: _zero(
            admin,
            "SELECT count(*) FROM work.work_items WHERE org_id = 'big' "
            "AND status NOT IN ('applied', 'canceled')",
        ),
        180,
    )
    await _until("the small tenant's items ended", lambda: _done(admin, "small"), 120)


async def _budget(run: _Run) -> None:
    admin, options, phase = run.admin, run.options, run.phase
    usage = (await run.stats())["usage"]
    per_call = (
        Decimal(usage["prompt_tokens"]) * PROMPT_PRICE
        + Decimal(usage["completion_tokens"]) * COMPLETION_PRICE
    ) / 1_000_000
    items = options.governance_capped_items
    phase.budget = per_call * items / 2
    budgets = BudgetCommands(run.producer)
    await budgets.set("capped", Period.DAY, cost_limit=phase.budget)
    await _submit(run.commands, "capped", items // EPICS)
    await _until(
        "the capped org's items were applied or parked",
        lambda: _zero(
            admin,
            "SELECT count(*) FROM work.work_items WHERE org_id = 'capped' "
            "AND status IN ('queued', 'claimed', 'running', 'failed')",
        ),
        240,
    )
    view = await budgets.get("capped")
    assert view is not None
    phase.spent = view.cost
    phase.parked = view.parked
    phase.capped_applied = await admin.fetchval(
        "SELECT count(*) FROM work.work_items WHERE org_id = 'capped' AND status = 'applied'"
    )
    phase.capped_answered = await admin.fetchval(
        "SELECT count(*) FROM work.ledger_entries l JOIN work.work_items w USING (work_item_id) "
        "WHERE w.org_id = 'capped' AND l.entry_type = 'response'"
    )
    change = await budgets.set("capped", Period.DAY, cost_limit=phase.budget * 4)
    phase.resumed = change.resumed
    await _until("the resumed items were applied", lambda: _done(admin, "capped"), 240)


async def _ge(value: Any, least: int) -> bool:
    return int(await value) >= least


async def _zero(admin: asyncpg.Connection, sql: str) -> bool:
    return int(await admin.fetchval(sql)) == 0


async def _started(admin: asyncpg.Connection, org: str) -> int:
    return int(
        await admin.fetchval(
            "SELECT count(DISTINCT w.work_item_id) FROM work.work_items w "
            "JOIN work.ledger_entries l USING (work_item_id) "
            "WHERE w.org_id = $1 AND l.entry_type = 'prompt'",
            org,
        )
    )


async def _done(admin: asyncpg.Connection, org: str) -> bool:
    live = await admin.fetchval(
        "SELECT count(*) FROM work.work_items WHERE org_id = $1 "
        "AND status NOT IN ('applied', 'dead_letter', 'canceled')",
        org,
    )
    return int(live) == 0


def _p99(values: list[float]) -> float:
    """Nearest-rank 99th percentile."""
    if not values:
        return math.inf
    return sorted(values)[max(0, math.ceil(0.99 * len(values)) - 1)]


def _report(  # noqa: PLR0917 - everything measured
    report: Report,
    options: Options,
    phase: Phase,
    stats: dict[str, Any],
    gauge: Gauge | None,
    executor: asyncio.subprocess.Process | None,
) -> None:
    answered = stats.get("answered", [])
    start, end = phase.window
    inside = [a for a in answered if start <= a[1] <= end]
    mean_latency = statistics.fmean(a[2] for a in answered) if answered else math.inf
    window_latency = statistics.fmean(a[2] for a in inside) if inside else math.inf
    throughput = len(inside) / (end - start) if end > start else 0.0
    limit = options.governance_concurrency / window_latency
    ratio = throughput / limit if limit else 0.0
    report.add(
        "governed_throughput",
        throughput,
        "calls/s",
        f"{len(inside):,} calls answered in {end - start:.0f} s of a "
        f"{options.governance_big_items:,}-item tenant; gateway cap "
        f"{options.governance_concurrency}, mean latency {window_latency:.2f} s",
    )
    report.add(
        "governed_throughput_vs_limit", ratio, "x", "answered per second / (cap / mean latency)"
    )
    report.target("throughput / gateway limit", ratio, ">= 0.9", ratio >= 0.9)
    tts = _p99(phase.tts)
    report.add(
        "small_tenant_p99_time_to_start",
        tts,
        "s",
        f"{len(phase.tts)} items next to {options.governance_big_items:,} queued; mean call "
        f"latency {mean_latency:.2f} s",
    )
    report.add("small_tenant_p99_tts_vs_mean_latency", tts / mean_latency, "x")
    report.target(
        "small tenant p99 time-to-start / mean latency",
        tts / mean_latency,
        "< 2x",
        tts < 2 * mean_latency,
    )
    report.add(
        "budget_spent_vs_budget",
        float(phase.spent / phase.budget) if phase.budget else 0.0,
        "x",
        f"{phase.capped_applied} of {options.governance_capped_items} items applied, "
        f"{phase.parked} parked; then {phase.resumed} resumed by raising it",
    )
    answered_cost = (
        Decimal(phase.capped_answered)
        * (
            Decimal(stats.get("usage", {}).get("prompt_tokens", 0)) * PROMPT_PRICE
            + Decimal(stats.get("usage", {}).get("completion_tokens", 0)) * COMPLETION_PRICE
        )
        / 1_000_000
    )
    report.check(
        "a budget at half the workload's cost is never exceeded, the rest is parked",
        phase.spent <= phase.budget
        and answered_cost <= phase.budget
        and phase.parked > 0
        and phase.capped_applied + phase.parked == options.governance_capped_items,
        f"spent {phase.spent.normalize():f} (gateway: {answered_cost.normalize():f}) of "
        f"{phase.budget.normalize():f}; {phase.capped_applied} applied, {phase.parked} parked",
    )
    paid_twice = int(stats.get("paid_twice", -1))
    report.add(
        "governed_paid_twice",
        paid_twice,
        "attempts",
        "Idempotency-Keys (one attempt of one item) the gateway answered more than once",
    )
    report.target("attempts paid twice", paid_twice, "0", paid_twice == 0)
    report.check(
        "no item paid twice for one attempt",
        stats.get("most_calls_per_key", 99) == 1 and paid_twice == 0,
        f"{stats.get('calls', 0):,} calls, {stats.get('keys', 0):,} keys, the most calls of one "
        f"key {stats.get('most_calls_per_key')}, refused {stats.get('refused', {})}",
    )
    report.check(
        "the big tenant's waiting items were canceled without a call",
        phase.canceled > 0,
        f"{phase.canceled:,} items canceled",
    )
    if gauge is not None:
        growth = gauge.growth_mib()
        report.add("governed_executor_peak_rss", gauge.peak_mib(), "MiB")
        report.add(
            "governed_executor_rss_growth",
            growth,
            "MiB",
            "steady window's last quarter minus its third (the first half warms up); quarters "
            + " / ".join(f"{q:.0f}" for q in gauge.quarters_mib())
            + " MiB",
        )
        report.target("executor RSS growth", growth, "< 5 MiB (flat)", growth < 5)
    report.check(
        "the executor exited cleanly",
        executor is not None and executor.returncode == 0,
        f"exit code {executor.returncode if executor is not None else None}",
    )
    latency = options.governance_latency
    report.notes.append(
        f"governance: gateway on loopback, lognormal latency median {latency:g} s, p99 "
        f"{6 * latency:g} s (unit not scaled); cap {options.governance_concurrency} calls, "
        f"{options.governance_rate:g} calls/s; 429s {stats.get('refused', {})}; most in "
        f"flight {stats.get('most_in_flight')}"
    )
