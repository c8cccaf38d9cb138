"""Figures 1, 2, 3, 5 and 6: the rule-candidates consumer over one pre-filled topic.

Order of the stages (all on the same topic and data, one run):

1. fill the topic (6 partitions, keyed by cluster_id);
2. raw drain (ceiling);
3. first pass: ``spectral consume rule-candidates`` into an empty database (+ RSS);
4. second pass: a fresh group into the same database — every record is a duplicate;
5. naive consumer (baseline) on a prefix, into an empty database of its own;
6. scaling: 1, 2 and 3 processes in one group, each series into an empty database.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from benchmarks.baselines import Throughput, naive, raw_drain
from benchmarks.dataset import DatasetSpec, DatasetStats, generate, verify_sample
from benchmarks.options import Options
from benchmarks.processes import (
    GroupRun,
    Servers,
    busy_fraction,
    machine_sample,
    run_consumers,
)
from benchmarks.publish import publish
from benchmarks.report import Report
from benchmarks.stack import BenchStack
from contracts import FAILURE_CLUSTER_DETECTED
from spectral.kafka.groups import committed_offsets
from spectral.settings import load_settings

DEPLOYMENT = "rule-candidates"


@dataclass(frozen=True)
class Topic:
    name: str
    ends: dict[int, int]
    stats: DatasetStats

    @property
    def records(self) -> int:
        return sum(self.ends.values())


async def fill(stack: BenchStack, options: Options, report: Report) -> Topic:
    name = stack.topic_prefix + FAILURE_CLUSTER_DETECTED
    await stack.create_topic(name, options.partitions)
    spec = DatasetSpec(events=options.events, clusters=options.clusters)
    stats = DatasetStats()
    started = time.perf_counter()
    records = list(generate(spec, stats))
    checked = verify_sample(records)
    generated = time.perf_counter() - started
    published = await publish(stack.endpoints.kafka_bootstrap, name, options.partitions, records)
    del records
    report.notes.append(
        f"data: {stats.records:,} records on {options.partitions} partitions, "
        f"{len(stats.clusters_touched):,} clusters, mean {stats.mean_bytes:,.0f} B/record "
        f"(1-3 evidence items, 2 on average: the contract's realistic 10-item record is "
        f"~1.8 KB), {stats.kinds.get('duplicate', 0):,} duplicates, "
        f"{stats.kinds.get('stale', 0):,} stale snapshots; generated in {generated:.1f} s "
        f"({checked} decoded with contracts.decode), published in {published.seconds:.1f} s"
    )
    return Topic(name, published.end_offsets, stats)


@dataclass(frozen=True)
class _Stage:
    """What every consumer run of one triage benchmark shares."""

    stack: BenchStack
    options: Options
    report: Report
    topic: Topic
    logs: Path
    servers: Servers

    async def consumers(
        self,
        label: str,
        name: str,
        members: int,
        database_url: str,
        *,
        fresh: bool,
        pythonpath: str | None = None,
    ) -> GroupRun:
        """``members`` processes in a new group over the topic, verified afterwards."""
        group = await run_consumers(
            DEPLOYMENT,
            members=members,
            group=f"bench-{self.stack.run_id}-{name}",
            env=self.stack.env(database_url, pythonpath),
            log_dir=self.logs,
            limit_seconds=self.options.limit(),
            servers=self.servers,
            database_url=database_url,
        )
        await _verify(
            self.stack,
            self.report,
            label,
            group=group,
            topic=self.topic,
            database_url=database_url,
            fresh=fresh,
        )
        return group


async def run_triage(stack: BenchStack, options: Options, report: Report) -> None:
    topic = await fill(stack, options, report)
    stage = _Stage(stack, options, report, topic, options.log_dir / stack.run_id, stack.servers())
    drain_rate = await _raw_drain(stage)

    first_db = await stack.database("first")
    first = await stage.consumers("first pass", "first", 1, first_db, fresh=True)
    _first_pass_figures(report, first)
    second = await stage.consumers("second pass", "second", 1, first_db, fresh=False)
    report.add(
        "consumer_all_duplicates",
        second.per_second,
        "events/s",
        f"same topic, fresh group, same database: 100% duplicates; "
        f"{second.cpu_us_per_event:.0f} us CPU/event",
    )
    baseline = await _naive(stage)
    await _scaling(stage, first)
    if options.compare is not None:
        await _compare(stage, options.compare)

    ratio_naive = first.per_second / baseline.per_second if baseline.per_second else 0.0
    ratio_drain = first.per_second / drain_rate if drain_rate else 0.0
    ratio_dupes = second.per_second / first.per_second if first.per_second else 0.0
    report.add("consumer_vs_naive", ratio_naive, "x")
    report.add("consumer_vs_raw_drain", ratio_drain, "x")
    report.add("all_duplicates_vs_first_pass", ratio_dupes, "x")
    report.target("consumer / naive", ratio_naive, ">= 10x", ratio_naive >= 10)
    report.target("consumer / raw drain", ratio_drain, ">= 0.5x", ratio_drain >= 0.5)
    report.target("all-duplicates / first pass", ratio_dupes, ">= 1x", ratio_dupes >= 1)
    run = first.runs[0]
    report.target("consumer peak RSS (MiB)", run.peak_rss_mib, "< 200", run.peak_rss_mib < 200)
    growth = run.rss_growth_mib()
    report.target("consumer RSS growth Q1->Q4 (MiB)", growth, "< 10 (no trend)", growth < 10)


async def _raw_drain(stage: _Stage) -> float:
    """The ceiling; cheap to measure, so the median of three steadies it on a noisy box."""
    topic = stage.topic
    drains: list[tuple[float, float]] = []
    for _ in range(stage.options.drain_repeats):
        before = machine_sample()
        drain = await raw_drain(
            stage.stack.endpoints.kafka_bootstrap,
            topic.name,
            topic.ends,
            limit_seconds=stage.options.limit(),
        )
        drains.append((drain.per_second, busy_fraction(before, machine_sample())))
    rate, busy = statistics.median_high(drains)
    stage.report.add(
        "raw_drain",
        rate,
        "events/s",
        f"median of {len(drains)}: aiokafka getmany + json.loads, the engine's fetch settings; "
        f"machine {busy:.0%} busy",
    )
    return rate


def _first_pass_figures(report: Report, first: GroupRun) -> None:
    report.add(
        "consumer_first_pass",
        first.per_second,
        "events/s",
        f"{first.records:,} events, first fetch to last offset commit, 1 process",
    )
    report.add(
        "consumer_cpu_per_event",
        first.cpu_us_per_event,
        "us",
        f"consumer process CPU, first pass; whole machine {first.machine_busy:.0%} busy",
    )
    postgres_us, kafka_us = first.server_us_per_event()
    report.add(
        "postgres_cpu_per_event",
        postgres_us,
        "us",
        f"this database's PostgreSQL backends + server processes, first pass; "
        f"Kafka broker {kafka_us:.1f} us/event",
    )
    run = first.runs[0]
    report.add("consumer_peak_rss", run.peak_rss_mib, "MiB", "VmRSS, first pass")
    report.add(
        "consumer_rss_growth",
        run.rss_growth_mib(),
        "MiB",
        "median VmRSS of the last quarter minus the first quarter",
    )


async def _naive(stage: _Stage) -> Throughput:
    naive_db = await stage.stack.database("naive")
    baseline = await naive(
        stage.stack.endpoints.kafka_bootstrap,
        stage.topic.name,
        naive_db,
        group=f"bench-{stage.stack.run_id}-naive",
        limit=min(stage.options.naive_events, stage.topic.records),
        limit_seconds=stage.options.limit(),
    )
    stage.report.add(
        "naive_consumer",
        baseline.per_second,
        "events/s",
        f"first {baseline.events:,} events: one transaction + one offset commit per event",
    )
    return baseline


async def _scaling(stage: _Stage, first: GroupRun) -> None:
    """1, 2, 3 members of one group, each series into an empty database of its own."""
    scaling: dict[int, GroupRun] = {}
    for members in stage.options.scaling:
        if members == 1 and not stage.options.rerun_single:
            scaling[members] = first
            continue
        db = await stage.stack.database(f"scale{members}")
        scaling[members] = await stage.consumers(
            f"scaling x{members}", f"scale{members}", members, db, fresh=True
        )
    expected = (first.outcome("applied"), first.outcome("stale"))
    for members, group in sorted(scaling.items()):
        if group is not first:
            got = (group.outcome("applied"), group.outcome("stale"))
            stage.report.check(
                f"scaling x{members}: the same applied/stale outcomes as the first pass",
                got == expected,
                f"{got[0]:,}/{got[1]:,} vs {expected[0]:,}/{expected[1]:,}",
            )
        note = (
            "the first pass"
            if group is first
            else f"{members} processes, one group; machine {group.machine_busy:.0%} busy"
        )
        stage.report.add(f"scaling_{members}_processes", group.per_second, "events/s", note)


async def _compare(stage: _Stage, other: Path) -> None:
    """First passes of this checkout and of ``other``, alternated (this, other, this, other)
    so drift on a shared machine hits both alike; medians of each."""
    runs: dict[str, list[GroupRun]] = {"this": [], "other": []}
    for index in range(2 * stage.options.compare_rounds):
        side = "this" if index % 2 == 0 else "other"
        db = await stage.stack.database(
            f"ab{index}", None if side == "this" else other / "schemas" / "sql"
        )
        runs[side].append(
            await stage.consumers(
                f"A/B {side} checkout #{index // 2 + 1}",
                f"ab{index}",
                1,
                db,
                fresh=True,
                pythonpath=None if side == "this" else str(other),
            )
        )
    for side, label in (("this", "this checkout"), ("other", f"checkout at {other}")):
        rate = statistics.median_high(g.per_second for g in runs[side])
        cpu = statistics.median_high(g.cpu_us_per_event for g in runs[side])
        rss = statistics.median_high(g.runs[0].peak_rss_mib for g in runs[side])
        note = f"{label}, median of {len(runs[side])} first passes alternated with the other"
        stage.report.add(f"ab_{side}_first_pass", rate, "events/s", note)
        stage.report.add(f"ab_{side}_cpu_per_event", cpu, "us", label)
        stage.report.add(f"ab_{side}_peak_rss", rss, "MiB", label)


async def _verify(
    stack: BenchStack,
    report: Report,
    label: str,
    *,
    group: GroupRun,
    topic: Topic,
    database_url: str,
    fresh: bool,
) -> None:
    """Every record accounted for, offsets at the end, the table as the data says."""
    outcomes = {k: group.outcome(k) for k in ("applied", "stale", "deduplicated", "dead_lettered")}
    exits = [r.exit_code for r in group.runs]
    report.check(
        f"{label}: processes exited 0 after going idle", all(c == 0 for c in exits), f"{exits}"
    )
    # A member that joins or leaves moves partitions: records fetched but not yet committed
    # are delivered again to their new owner and deduplicated (that is the design).
    again = group.records - topic.records
    report.check(
        f"{label}: every record consumed, none dead-lettered, each distinct event applied or "
        "judged stale exactly once",
        again >= 0
        and outcomes["dead_lettered"] == 0
        and (
            outcomes["deduplicated"] == group.records
            if not fresh
            else outcomes["applied"] + outcomes["stale"] == len(topic.stats.keys)
        ),
        f"{group.records:,} consumed for {topic.records:,} records"
        + (f" ({again:,} delivered again after a rebalance)" if again else "")
        + f"; {outcomes}; {len(topic.stats.keys):,} distinct events",
    )
    offsets = await committed_offsets(
        load_settings(),
        stack.endpoints.kafka_bootstrap,
        group.group,
        [(topic.name, partition) for partition in topic.ends],
    )
    done = sum(offset or 0 for offset in offsets.values())
    report.check(
        f"{label}: committed offsets reach the end of every partition",
        done == topic.records,
        f"{done:,} of {topic.records:,}",
    )
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetchval("SELECT count(*) FROM platform.rule_candidates_pending")
        handled = await conn.fetchval("SELECT count(*) FROM core.event_handled")
    finally:
        await conn.close()
    clusters = len(topic.stats.clusters_touched)
    if fresh:
        report.check(
            f"{label}: one row per cluster, one dedup row per applied or stale event",
            rows == clusters and handled == outcomes["applied"] + outcomes["stale"],
            f"{rows:,} rows for {clusters:,} clusters; {handled:,} event_handled rows",
        )
    else:
        report.check(
            f"{label}: nothing applied twice",
            handled == len(topic.stats.keys) and rows == clusters,
            f"{handled:,} event_handled rows; {rows:,} rows for {clusters:,} clusters",
        )
