"""The budget stage (issue 23's acceptance): nested budgets hold as a hard cap on admission
under concurrency, against a gateway that over-reports usage.

``budget_items`` items (1,500: generate-alls of 100 epics) of one org in two projects are worked by
``budget_executors`` ``spectral consume work-executor`` processes (their own processes, each a
pool of 16), against a gateway on loopback (in this process) that answers after a lognormal
latency (median ``budget_latency`` s, p99 6 x that) with a fixed honest usage — except on one
call in ``OVER_EVERY`` (drawn by a seeded generator), where it reports a completion of
``OVER_COMPLETION`` tokens against the ``max_tokens`` it was sent (a gateway that ignores it).

Five nested budget scopes, each with a token limit below what its items would use: the org,
each of its two projects, one generate-all thread of the first project, and the model route
(all of them). Every scope's limit binds at some point; the run ends when every item is applied
or parked. Figures (JSON lines beside the governance stage's):

* **admission overshoot** per scope: what spectral admitted — each call counted at its
  reservation, or at what it was billed when that was less — beyond the limit. Must be 0.
* **over-reported excess**: what the gateway billed beyond honest usage, and what spectral
  detected as billed beyond reservations (``work.spend.overrun_tokens``, the route's
  ``overrun_tokens``: what ``work_usage_overrun_tokens_total`` counts and the
  ``SpectralWorkProviderOverrun`` alert fires on). Every billed token is in the ledger as
  billed (checked per call against the gateway's record).
* **utilisation** of each scope that parked work: settled spend / limit at the end (>= 95 %:
  no false refusal while reservations leave room).
* **paid twice**: Idempotency-Keys the gateway answered more than once. Must be 0.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import signal
import socket
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import asyncpg
import uvicorn

from benchmarks.gateway import Gateway, Receive, Scope, Send, _respond
from benchmarks.options import Options
from benchmarks.processes import spectral_executable
from benchmarks.report import Report
from benchmarks.stack import BenchStack
from contracts import WORK_ITEM_ENQUEUED
from producers.work.budgets import BudgetCommands
from producers.work.commands import GenerateAll, WorkCommands
from producers.work.domain.budgets import Period, ScopeKind
from spectral.db.connect import create_pool

MODEL: Final = "budget-model"
ORG: Final = "capped-org"
EPICS: Final = 100
MAX_TOKENS: Final = 200
PROMPT_TOKENS: Final = 400
COMPLETION_TOKENS: Final = 150
HONEST: Final = PROMPT_TOKENS + COMPLETION_TOKENS
OVER_EVERY: Final = 40
OVER_COMPLETION: Final = 2_500
POOL: Final = 16
UTILISATION: Final = 0.95


class LyingGateway(Gateway):
    """The benchmark gateway without capacity limits, recording what it billed per
    Idempotency-Key and over-reporting the usage of one call in ``OVER_EVERY``."""

    def __init__(self, *, median: float, seed: int) -> None:
        super().__init__(
            concurrency=1_000_000,
            rate=1e9,
            median=median,
            p99=6 * median,
            prompt_tokens=PROMPT_TOKENS,
            completion_tokens=COMPLETION_TOKENS,
            seed=seed,
        )
        self.over = random.Random(seed + 1)
        self.billed: dict[str, int] = {}
        self.over_reported: dict[str, int] = {}
        """key -> tokens billed beyond honest usage."""
        self.answered_keys: Counter[str] = Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] != "/v1/chat/completions" or scope["method"] != "POST":
            await _respond(send, 404, {"error": {"message": "not found"}})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        key = dict(scope["headers"]).get(b"idempotency-key", b"").decode()
        self.keys[key] += 1
        latency = min(self.rng.lognormvariate(self.mu, self.sigma), 30.0)
        self._account(+1)
        try:
            await asyncio.sleep(latency)
        finally:
            self._account(-1)
        answer = self._answer(body)
        completion = COMPLETION_TOKENS
        if self.over.randrange(OVER_EVERY) == 0:
            completion = OVER_COMPLETION
            self.over_reported[key] = OVER_COMPLETION - COMPLETION_TOKENS
        answer["usage"] = {
            "prompt_tokens": PROMPT_TOKENS,
            "completion_tokens": completion,
            "total_tokens": PROMPT_TOKENS + completion,
        }
        self.billed[key] = PROMPT_TOKENS + completion
        self.answered_keys[key] += 1
        await _respond(send, 200, answer)


@dataclass
class Outcome:
    limits: dict[tuple[str, str], int] = field(default_factory=dict)
    admitted: dict[tuple[str, str], int] = field(default_factory=dict)
    settled: dict[tuple[str, str], int] = field(default_factory=dict)
    parked_by: dict[tuple[str, str], int] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    reservations: int = 0
    overruns: int = 0
    overrun_tokens: int = 0
    route_overrun_tokens: int = 0
    ledger_mismatches: int = 0
    ledger_billed: int = 0
    seconds: float = 0.0
    exit_codes: list[int | None] = field(default_factory=list)


# What each budgeted scope admitted (every call at its reservation, or at what it was billed
# when that was less: a provider overrun is not admission) and its settled spend, from the
# items and threads themselves (not from the scope columns the claim writes on spend rows).
_SCOPES = """
WITH s AS (
    SELECT x.state, x.tokens, x.reserved_tokens, x.model, w.org_id, w.project_id,
           w.thread_id, t.parent_thread_id
    FROM work.spend x
    JOIN work.work_items w USING (work_item_id)
    JOIN work.threads t ON t.thread_id = w.thread_id
)
SELECT b.scope_kind, b.scope_id, b.token_limit,
       coalesce(sum(CASE s.state WHEN 'settled' THEN least(s.tokens, s.reserved_tokens)
                                 WHEN 'released' THEN 0 ELSE s.reserved_tokens END),
                0)::bigint AS admitted,
       coalesce(sum(s.tokens) FILTER (WHERE s.state = 'settled'), 0)::bigint AS settled,
       (SELECT count(*) FROM work.work_items w
        WHERE w.status = 'parked' AND w.park_scope_kind = b.scope_kind
          AND w.park_scope_id = b.scope_id)::integer AS parked
FROM work.budget_scopes b
LEFT JOIN s ON (b.scope_kind = 'org' AND s.org_id = b.scope_id)
            OR (b.scope_kind = 'project' AND s.project_id = b.scope_id)
            OR (b.scope_kind = 'thread'
                AND b.scope_id IN (s.thread_id::text, s.parent_thread_id::text))
            OR (b.scope_kind = 'route' AND s.model = b.scope_id)
GROUP BY 1, 2, 3
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _backlog(name: str) -> dict[str, Any]:
    return {
        "title": f"Shop {name}",
        "epics": {
            f"E{n}": {"title": f"Step {n} of {name}", "description": "Pay with saved cards."}
            for n in range(1, EPICS + 1)
        },
    }


async def _submit(commands: WorkCommands, items: int) -> tuple[list[str], list[str]]:
    """Generate-alls of 100 epics, the first half of them in project A, the rest in B; the
    projects and the generate-all threads."""
    documents = max(2, items // EPICS)
    projects = [f"{ORG}-a", f"{ORG}-b"]
    threads = []
    for n in range(documents):
        project = projects[0] if n < (documents + 1) // 2 else projects[1]
        document = f"{ORG}-d{n}"
        await commands.put_document(project, document, _backlog(document))
        result = await commands.generate_all(GenerateAll(project, document, org_id=ORG))
        threads.append(str(result.thread_id))
    return projects, threads


def _executor_env(stack: BenchStack, database_url: str, port: int, journal: Path) -> dict[str, str]:
    limits = {MODEL: {"max_tokens": MAX_TOKENS, "prompt_price": "1", "completion_price": "2"}}
    return {
        **stack.env(database_url),
        "SPECTRAL_LOG_LEVEL": "WARNING",
        "SPECTRAL_SYNTHESIZER": "openai",
        "SPECTRAL_LLM_BASE_URL": f"http://127.0.0.1:{port}/v1",
        "SPECTRAL_LLM_ROUTES": json.dumps({"*": MODEL}),
        "SPECTRAL_LLM_LIMITS": json.dumps(limits),
        "SPECTRAL_WORK_POOL_SIZE": str(POOL),
        "SPECTRAL_WORK_CLAIM_POLL_SECONDS": "0.1",
        "SPECTRAL_WORK_JOURNAL_DIR": str(journal),
    }


async def run_budgets(stack: BenchStack, options: Options, report: Report) -> None:
    database_url = await stack.database("budgets")
    await stack.create_topic(stack.topic_prefix + WORK_ITEM_ENQUEUED, 3)
    port = _free_port()
    gateway = LyingGateway(median=options.budget_latency, seed=20261201)
    server = uvicorn.Server(
        uvicorn.Config(
            gateway,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="off",
            access_log=False,
            backlog=4096,
        )
    )
    serving = asyncio.create_task(server.serve())
    producer = await create_pool(database_url, role="spectral_producer", max_size=4)
    admin = await asyncpg.connect(database_url)
    outcome = Outcome()
    executors: list[asyncio.subprocess.Process] = []
    try:
        while not server.started:  # noqa: ASYNC110 - uvicorn exposes a flag, not an event
            await asyncio.sleep(0.05)
        commands = WorkCommands(producer)
        projects, threads = await _submit(commands, options.budget_items)
        per_project = options.budget_items // 2
        budgets = BudgetCommands(producer)
        # Each limit below what its items would use honestly: every scope binds.
        # (About two thirds of the items are admitted: 1,000 reservations of 1,500 items.)
        limits = {
            (ScopeKind.ORG, ORG): int(0.82 * options.budget_items * HONEST),
            (ScopeKind.PROJECT, projects[0]): int(0.72 * per_project * HONEST),
            (ScopeKind.PROJECT, projects[1]): int(0.84 * per_project * HONEST),
            (ScopeKind.THREAD, threads[0]): int(0.30 * EPICS * HONEST),
            (ScopeKind.ROUTE, MODEL): int(0.78 * options.budget_items * HONEST),
        }
        for scope, limit in limits.items():
            await budgets.set(scope, Period.DAY, token_limit=limit)
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="bench-budget-journal-") as journal:
            for n in range(options.budget_executors):
                folder = Path(journal) / f"e{n}"
                folder.mkdir()
                executors.append(
                    await asyncio.create_subprocess_exec(
                        spectral_executable(),
                        "consume",
                        "work-executor",
                        env=_executor_env(stack, database_url, port, folder),
                        stdout=asyncio.subprocess.DEVNULL,
                        stderr=asyncio.subprocess.DEVNULL,
                    )
                )
            try:
                await _until_settled(admin, options.limit())
            finally:
                outcome.seconds = time.monotonic() - started
                for process in executors:
                    process.send_signal(signal.SIGTERM)
                for process in executors:
                    try:
                        await asyncio.wait_for(process.wait(), timeout=60)
                    except TimeoutError:
                        process.kill()
                        await process.wait()
                outcome.exit_codes = [p.returncode for p in executors]
        await _measure(admin, gateway, outcome)
    finally:
        for process in executors:
            if process.returncode is None:
                process.kill()
        server.should_exit = True
        await serving
        await admin.close()
        await producer.close()
    _report(report, options, gateway, outcome)


async def _until_settled(admin: asyncpg.Connection, limit: float) -> None:
    """Until every item is applied or parked (nothing waiting, leased or outstanding)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        live = await admin.fetchval(
            "SELECT count(*) FROM work.work_items "
            "WHERE status IN ('queued', 'claimed', 'running', 'failed')"
        )
        if live == 0:
            return
        await asyncio.sleep(0.5)
    raise TimeoutError(f"items still live after {limit:.0f} s")


async def _measure(admin: asyncpg.Connection, gateway: LyingGateway, outcome: Outcome) -> None:
    for row in await admin.fetch(_SCOPES):
        scope = (row["scope_kind"], row["scope_id"])
        outcome.limits[scope] = row["token_limit"]
        outcome.admitted[scope] = row["admitted"]
        outcome.settled[scope] = row["settled"]
        outcome.parked_by[scope] = row["parked"]
    outcome.statuses = {
        r["status"]: r["n"]
        for r in await admin.fetch(
            "SELECT status, count(*)::integer AS n FROM work.work_items GROUP BY status"
        )
    }
    spend = await admin.fetch(
        "SELECT work_item_id::text || ':' || attempt AS key, state, tokens, reserved_tokens, "
        "overrun_tokens FROM work.spend"
    )
    outcome.reservations = len(spend)
    outcome.overruns = sum(1 for r in spend if r["overrun_tokens"] > 0)
    outcome.overrun_tokens = sum(r["overrun_tokens"] for r in spend)
    outcome.route_overrun_tokens = int(
        await admin.fetchval(
            "SELECT coalesce(sum(overrun_tokens), 0) FROM work.provider_routes WHERE model = $1",
            MODEL,
        )
    )
    settled = {r["key"]: r["tokens"] for r in spend if r["state"] == "settled"}
    outcome.ledger_billed = sum(settled.values())
    outcome.ledger_mismatches = sum(
        1 for key, billed in gateway.billed.items() if settled.get(key) != billed
    ) + sum(1 for key in settled if key not in gateway.billed)


def _report(report: Report, options: Options, gateway: LyingGateway, outcome: Outcome) -> None:
    overshoot = {
        scope: max(0, outcome.admitted[scope] - limit) for scope, limit in outcome.limits.items()
    }
    worst = max(overshoot.values(), default=0)
    report.add(
        "budget_admission_overshoot",
        worst,
        "tokens",
        "the most any of the 5 nested scopes admitted beyond its limit (each call at its "
        "reservation, or at its bill when less); "
        + ", ".join(
            f"{kind} {sid[:12]} {outcome.admitted[(kind, sid)]:,}/{limit:,}"
            for (kind, sid), limit in sorted(outcome.limits.items())
        ),
    )
    report.add(
        "budget_reservations",
        outcome.reservations,
        "reservations",
        f"made by {options.budget_executors} executors claiming concurrently, of "
        f"{options.budget_items:,} items: {outcome.statuses}",
    )
    report.target("budget admission overshoot", worst, "0", worst == 0)
    over_tokens = sum(gateway.over_reported.values())
    report.add(
        "budget_over_reported_calls",
        len(gateway.over_reported),
        "calls",
        f"the gateway billed {OVER_COMPLETION:,} completion tokens for max_tokens {MAX_TOKENS} "
        f"on these calls: {over_tokens:,} tokens beyond honest usage",
    )
    report.add(
        "budget_overrun_detected_tokens",
        outcome.overrun_tokens,
        "tokens",
        f"billed beyond reservations, on {outcome.overruns} call(s) (work.spend.overrun_tokens; "
        f"the route's fed-back counter: {outcome.route_overrun_tokens:,})",
    )
    report.check(
        "over-reported usage is detected with its size and recorded as billed",
        outcome.overruns > 0
        and outcome.overrun_tokens == outcome.route_overrun_tokens
        and outcome.ledger_mismatches == 0,
        f"{len(gateway.over_reported)} calls over-reported by {over_tokens:,} tokens; "
        f"{outcome.overruns} billed beyond their reservation by {outcome.overrun_tokens:,}; "
        f"ledger {outcome.ledger_billed:,} tokens vs gateway {sum(gateway.billed.values()):,} "
        f"({outcome.ledger_mismatches} call(s) differ)",
    )
    binding = {scope: n for scope, n in outcome.parked_by.items() if n > 0}
    utilisation = {scope: outcome.settled[scope] / outcome.limits[scope] for scope in binding}
    lowest = min(utilisation.values(), default=math.nan)
    report.add(
        "budget_utilisation_min",
        lowest,
        "x",
        "settled spend / limit at the end, of each scope that parked work: "
        + ", ".join(
            f"{kind} {sid[:12]} {u:.3f} ({binding[(kind, sid)]} parked)"
            for (kind, sid), u in sorted(utilisation.items())
        ),
    )
    report.target(
        "budget utilisation of the scopes that parked work",
        lowest,
        f">= {UTILISATION}",
        bool(utilisation) and lowest >= UTILISATION,
    )
    paid_twice = sum(1 for n in gateway.answered_keys.values() if n > 1)
    report.add(
        "budget_paid_twice",
        paid_twice,
        "attempts",
        f"Idempotency-Keys answered more than once, of {len(gateway.answered_keys):,}",
    )
    report.target("budget attempts paid twice", paid_twice, "0", paid_twice == 0)
    live = sum(n for s, n in outcome.statuses.items() if s not in {"applied", "parked"})
    report.check(
        "every item applied or parked, the executors exited cleanly",
        live == 0 and all(code == 0 for code in outcome.exit_codes),
        f"{outcome.statuses}; {outcome.reservations:,} reservations; exit codes "
        f"{outcome.exit_codes}; {outcome.seconds:.0f} s",
    )
    report.notes.append(
        f"budgets: {options.budget_items:,} items, {options.budget_executors} executors x pool "
        f"{POOL}, gateway lognormal latency median {options.budget_latency:g} s; honest usage "
        f"{HONEST} tokens, 1 call in {OVER_EVERY} billed {PROMPT_TOKENS + OVER_COMPLETION:,}; "
        f"{outcome.seconds:.0f} s to settle"
    )
