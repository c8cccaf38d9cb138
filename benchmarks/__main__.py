"""``python -m benchmarks`` (``make bench``): every figure in one run on the local stack.

Prints one JSON line per figure as it is measured, then the table; writes both under
benchmarks/results/ (git-ignored). Exit status 1 when a correctness check of the run failed
(targets that are missed are reported, not fatal).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from rich.console import Console

from benchmarks.budgets import run_budgets
from benchmarks.contention import run_contention
from benchmarks.dedup import run_dedup
from benchmarks.executor import run_executor
from benchmarks.freshness import run_freshness
from benchmarks.governance import run_governance
from benchmarks.options import DEFAULT_STAGES, STAGES, Options
from benchmarks.report import Report, machine
from benchmarks.soak import run_soak
from benchmarks.stack import BenchStack
from benchmarks.transports import run_transports
from benchmarks.triage import run_triage
from spectral.devstack import status
from spectral.observability.logging import configure_logging
from spectral.settings import load_settings


def _options(argv: list[str]) -> Options:
    defaults = Options()
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--events", type=int, default=defaults.events)
    parser.add_argument("--clusters", type=int, default=defaults.clusters)
    parser.add_argument("--naive-events", type=int, default=defaults.naive_events)
    parser.add_argument("--naive-seconds", type=float, default=defaults.naive_seconds)
    parser.add_argument(
        "--scaling", default=",".join(map(str, defaults.scaling)), help="e.g. 1,2,3 ('' = none)"
    )
    parser.add_argument(
        "--peers", default=",".join(defaults.peers), help="of faststream,quix,quix_guaranteed"
    )
    parser.add_argument("--drain-repeats", type=int, default=defaults.drain_repeats)
    parser.add_argument("--neighbour-processes", type=int, default=defaults.neighbour_processes)
    parser.add_argument("--neighbour-duty", type=float, default=defaults.neighbour_duty)
    parser.add_argument("--contention-rounds", type=int, default=defaults.contention_rounds)
    parser.add_argument("--executor-items", type=int, default=defaults.executor_items)
    parser.add_argument("--executor-epics", type=int, default=defaults.executor_epics)
    parser.add_argument(
        "--executor-baseline-items", type=int, default=defaults.executor_baseline_items
    )
    parser.add_argument("--dedup-prefill", type=int, default=defaults.dedup_prefill)
    parser.add_argument("--transports-events", type=int, default=defaults.transports_events)
    parser.add_argument("--soak-seconds", type=float, default=defaults.soak_seconds)
    parser.add_argument("--soak-rate", type=int, default=defaults.soak_rate)
    parser.add_argument("--governance-big-items", type=int, default=defaults.governance_big_items)
    parser.add_argument("--governance-window", type=float, default=defaults.governance_window)
    parser.add_argument("--governance-latency", type=float, default=defaults.governance_latency)
    parser.add_argument("--budget-items", type=int, default=defaults.budget_items)
    parser.add_argument("--freshness-rate", type=int, default=defaults.freshness_rate)
    parser.add_argument("--freshness-high-rate", type=int, default=defaults.freshness_high_rate)
    parser.add_argument("--freshness-seconds", type=float, default=defaults.freshness_seconds)
    parser.add_argument("--stages", default=",".join(DEFAULT_STAGES), help=f"of {','.join(STAGES)}")
    parser.add_argument("--stage-timeout", type=float, default=defaults.stage_timeout)
    parser.add_argument(
        "--budget", type=float, default=defaults.budget, help="seconds for the whole run"
    )
    parser.add_argument("--keep", action="store_true", help="keep the databases and topics")
    parser.add_argument(
        "--compare",
        type=Path,
        default=None,
        help="another checkout (e.g. a git worktree): A/B its consumer against this one",
    )
    args = parser.parse_args(argv)
    stages = tuple(s for s in args.stages.split(",") if s)
    unknown = set(stages) - set(STAGES)
    if unknown:
        parser.error(f"unknown stages: {sorted(unknown)}")
    return Options(
        events=args.events,
        clusters=args.clusters,
        naive_events=args.naive_events,
        naive_seconds=args.naive_seconds,
        scaling=tuple(int(n) for n in args.scaling.split(",") if n),
        peers=tuple(p for p in args.peers.split(",") if p),
        drain_repeats=args.drain_repeats,
        neighbour_processes=args.neighbour_processes,
        neighbour_duty=args.neighbour_duty,
        contention_rounds=args.contention_rounds,
        executor_items=args.executor_items,
        executor_baseline_items=args.executor_baseline_items,
        executor_epics=args.executor_epics,
        dedup_prefill=args.dedup_prefill,
        transports_events=args.transports_events,
        soak_seconds=args.soak_seconds,
        soak_rate=args.soak_rate,
        governance_big_items=args.governance_big_items,
        governance_window=args.governance_window,
        governance_latency=args.governance_latency,
        budget_items=args.budget_items,
        freshness_rate=args.freshness_rate,
        freshness_high_rate=args.freshness_high_rate,
        freshness_seconds=args.freshness_seconds,
        stages=stages,
        stage_timeout=args.stage_timeout,
        budget=args.budget,
        compare=args.compare.resolve() if args.compare else None,
        keep=args.keep,
    )


Runner = Callable[[BenchStack, Options, Report], Awaitable[None]]

RUNNERS: dict[str, Runner] = {
    "triage": run_triage,
    "contention": run_contention,
    "freshness": run_freshness,
    "executor": run_executor,
    "dedup": run_dedup,
    "transports": run_transports,
    "soak": run_soak,
    "governance": run_governance,
    "budgets": run_budgets,
}
"""Every stage, in the order a run takes them (``--stages`` picks a subset, each runnable on its
own). A new stage is a ``run_NAME(stack, options, report)`` coroutine added here and to
``options.STAGES``."""


def _commit() -> str:
    """The checkout's commit (``-dirty`` when files differ from it), or ``unknown``."""
    try:
        described = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=7"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return described.stdout.strip() or "unknown"


async def _run(options: Options, report: Report) -> None:
    report.context["commit"] = _commit()
    report.context["stages"] = ",".join(s for s in RUNNERS if s in options.stages)
    stack = BenchStack.resolve()
    stack_status = status(load_settings())
    report.context["kafka"] = stack_status.kafka.split(" log ")[0].rstrip(",")
    report.context["postgres"] = stack_status.postgres.split(", data ")[0]
    try:
        for name, runner in RUNNERS.items():
            if name in options.stages:
                report.load(f"{name}_start")
                await runner(stack, options, report)
                report.load(f"{name}_end")
                if not options.keep:
                    await stack.settle()
    finally:
        if not options.keep:
            await stack.close()


def main(argv: list[str] | None = None) -> int:
    options = _options(sys.argv[1:] if argv is None else argv)
    configure_logging("WARNING", "console")
    report = Report()
    started = time.monotonic()
    try:
        asyncio.run(_run(options, report))
    finally:
        report.machine_end = machine()
        report.notes.append(f"whole run: {time.monotonic() - started:.0f} s")
        console = Console(width=130)
        report.render(console)
        path = report.write()
        console.print(
            f"results: {path} (and its .md and .json, latest.md / latest.jsonl / latest.json "
            "beside it; `make bench-publish` makes latest.json the run the performance page cites)"
        )
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
