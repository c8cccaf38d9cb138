"""``python -m benchmarks.profile``: the rule-candidates engine in-process under pyinstrument.

Fills a topic like ``make bench`` does, runs ``ConsumerEngine`` with the rule-candidates handler
in this process until it goes idle, and writes the profile (text and HTML) under
benchmarks/results/. For finding hot spots, not for figures: the profiler slows the run.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from pyinstrument import Profiler

from benchmarks.inprocess import rule_candidates_engine
from benchmarks.options import Options
from benchmarks.report import RESULTS_DIR, Report
from benchmarks.stack import BenchStack
from benchmarks.triage import fill
from spectral.engine.collector import tune_for_batches
from spectral.observability.logging import configure_logging


async def _profile(options: Options, duplicates: bool, out: Path) -> None:
    stack = BenchStack.resolve()
    try:
        report = Report()
        await fill(stack, options, report)
        print(report.notes[-1])
        database_url = await stack.database("profile")
        passes = 2 if duplicates else 1
        for number in range(passes):
            engine = rule_candidates_engine(stack, database_url, f"profile-{stack.run_id}-{number}")
            profiler = Profiler(interval=0.001, async_mode="disabled")
            started = time.perf_counter()
            if number == passes - 1:
                profiler.start()
            summary = await engine.run()
            if profiler.is_running:
                profiler.stop()
            seconds = time.perf_counter() - started - 2
            print(
                f"pass {number + 1}: {summary.records:,} records in ~{seconds:.1f} s "
                f"(~{summary.records / seconds:,.0f}/s, profiler on: {number == passes - 1})"
            )
        out.with_suffix(".txt").write_text(profiler.output_text(unicode=True, show_all=False))
        out.with_suffix(".html").write_text(profiler.output_html())
        print(f"profile: {out.with_suffix('.txt')} and .html")
    finally:
        await stack.close()


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile")
    parser.add_argument("--events", type=int, default=60_000)
    parser.add_argument("--clusters", type=int, default=4_000)
    parser.add_argument("--duplicates", action="store_true", help="profile the all-duplicates pass")
    args = parser.parse_args()
    configure_logging("WARNING", "console")
    tune_for_batches()  # as `spectral consume` does
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / f"profile-{time.strftime('%Y%m%dT%H%M%S')}"
    options = Options(events=args.events, clusters=args.clusters)
    asyncio.run(_profile(options, args.duplicates, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
