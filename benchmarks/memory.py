"""``python -m benchmarks.memory``: does the rule-candidates engine retain memory as it goes?

``make bench`` samples the consumer process's RSS (``consumer_rss_growth``: the median of the
first pass's last quarter minus that of its first). RSS also moves for reasons that are not
retained objects: the C allocator keeps freed memory for reuse (a batch of a few thousand
envelopes, fetch responses of a megabyte per partition), so it rises in steps to a high-water
mark and stays there. This tool tells the two apart: it fills a topic like ``make bench``, runs
``ConsumerEngine`` with the rule-candidates handler in this process under ``tracemalloc``, and
prints, at each quarter of the records, the Python heap still allocated (tracemalloc's traced
memory; this process's RSS would say nothing: filling the topic here leaves its own high-water
mark), then the allocation sites that grew most from the first quarter to the end. A leak shows
as the heap climbing quarter after quarter.
For finding retained memory, not for figures: tracemalloc slows the run several times.
"""

from __future__ import annotations

import argparse
import asyncio
import tracemalloc

from benchmarks.inprocess import rule_candidates_engine
from benchmarks.options import Options
from benchmarks.report import Report
from benchmarks.stack import BenchStack
from benchmarks.triage import fill
from spectral.engine.collector import tune_for_batches
from spectral.engine.engine import ConsumerEngine
from spectral.observability.logging import configure_logging

_MIB = 1024 * 1024
_FRAMES = 6
_TOP = 8


def _line(label: str, records: int) -> str:
    traced, _ = tracemalloc.get_traced_memory()
    return f"{label:>6}: {records:>9,} records  Python heap {traced / _MIB:7.2f} MiB"


async def _watch(engine: ConsumerEngine, events: int, first: list[tracemalloc.Snapshot]) -> None:
    marks = [events // 4, events // 2, events * 3 // 4]
    while marks:
        records = engine.summary.records
        if records >= marks[0]:
            marks.pop(0)
            print(_line(f"Q{3 - len(marks)}", records), flush=True)
            if not first:
                first.append(tracemalloc.take_snapshot())
        await asyncio.sleep(0.05)


async def _measure(options: Options) -> None:
    stack = BenchStack.resolve()
    try:
        report = Report()
        await fill(stack, options, report)
        print(report.notes[-1])
        database_url = await stack.database("memory")
        engine = rule_candidates_engine(stack, database_url, f"memory-{stack.run_id}")
        first: list[tracemalloc.Snapshot] = []
        tracemalloc.start(_FRAMES)
        watch = asyncio.create_task(_watch(engine, options.events, first))
        summary = await engine.run()
        watch.cancel()
        print(_line("end", summary.records))
        if first:
            print("allocation sites that grew most from Q1 to the end:")
            grown = tracemalloc.take_snapshot().compare_to(first[0], "traceback")
            for stat in sorted(grown, key=lambda s: s.size_diff, reverse=True)[:_TOP]:
                print(f"  {stat.size_diff / 1024:+9.1f} KiB  {stat.count_diff:+7,} blocks")
                for frame in stat.traceback.format()[-4:]:
                    print(f"      {frame.strip()}")
        tracemalloc.stop()
    finally:
        await stack.close()


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory")
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--clusters", type=int, default=4_000)
    args = parser.parse_args()
    configure_logging("WARNING", "console")
    tune_for_batches()  # as `spectral consume` does
    asyncio.run(_measure(Options(events=args.events, clusters=args.clusters)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
