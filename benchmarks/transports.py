"""The ``transports`` stage: one ``spectral consume rule-candidates`` process per Kafka transport
and group protocol (aiokafka; confluent with the classic protocol; confluent with KIP-848's) over
the same pre-filled topic, each into an empty database of its own: throughput and the consumer
process's CPU per event (every thread: librdkafka's included), and confluent's CPU over
aiokafka's.

The runs take turns, aiokafka first and last, so a machine getting busier or quieter over the
stage shows as aiokafka's two runs disagreeing (both are reported; the ratios use their mean).
The topic has a prefix of its own, so the stage runs beside ``triage`` in one ``make bench``.
"""

from __future__ import annotations

import statistics
import time

import asyncpg

from benchmarks.dataset import DatasetSpec, DatasetStats, generate
from benchmarks.options import Options
from benchmarks.processes import GroupRun, run_consumers
from benchmarks.publish import publish
from benchmarks.report import Report
from benchmarks.stack import BenchStack
from contracts import FAILURE_CLUSTER_DETECTED

DEPLOYMENT = "rule-candidates"
RUNS: tuple[tuple[str, dict[str, str]], ...] = (
    ("aiokafka", {"SPECTRAL_KAFKA_TRANSPORT": "aiokafka"}),
    (
        "confluent_classic",
        {"SPECTRAL_KAFKA_TRANSPORT": "confluent", "SPECTRAL_KAFKA_GROUP_PROTOCOL": "classic"},
    ),
    (
        "confluent_consumer",
        {"SPECTRAL_KAFKA_TRANSPORT": "confluent", "SPECTRAL_KAFKA_GROUP_PROTOCOL": "consumer"},
    ),
    ("aiokafka", {"SPECTRAL_KAFKA_TRANSPORT": "aiokafka"}),
)
"""Each run's name and environment, in order (aiokafka brackets the others)."""


async def run_transports(stack: BenchStack, options: Options, report: Report) -> None:
    prefix = f"{stack.topic_prefix}transports."
    topic = prefix + FAILURE_CLUSTER_DETECTED
    await stack.create_topic(topic, options.partitions)
    stats = DatasetStats()
    spec = DatasetSpec(events=options.transports_events, clusters=options.clusters)
    published = await publish(
        stack.endpoints.kafka_bootstrap, topic, options.partitions, generate(spec, stats)
    )
    records = sum(published.end_offsets.values())
    runs: dict[str, list[GroupRun]] = {}
    logs = options.log_dir / stack.run_id
    for index, (name, transport) in enumerate(RUNS):
        database_url = await stack.database(f"transports_{index}")
        started = time.monotonic()
        group = await run_consumers(
            DEPLOYMENT,
            members=1,
            group=f"bench-{stack.run_id}-transports-{index}-{name}",
            env={**stack.env(database_url, topic_prefix=prefix), **transport},
            log_dir=logs,
            limit_seconds=options.limit(),
        )
        await _check(report, name, group, stats=stats, records=records, database_url=database_url)
        runs.setdefault(name, []).append(group)
        label = name if len(runs[name]) == 1 else f"{name}_again"
        report.add(
            f"transport_{label}_throughput",
            group.per_second,
            "events/s",
            f"one process, {records:,} records on {options.partitions} partitions; "
            f"{group.cpu_us_per_event:.1f} us CPU/event; machine busy "
            f"{group.machine_busy:.0%}; run {time.monotonic() - started:.0f} s",
        )
        report.add(
            f"transport_{label}_cpu_per_event",
            group.cpu_us_per_event,
            "us",
            "the consumer process's user+system CPU (all its threads) per event",
        )
    base_cpu = statistics.fmean(g.cpu_us_per_event for g in runs["aiokafka"])
    base_rate = statistics.fmean(g.per_second for g in runs["aiokafka"])
    for name in ("confluent_classic", "confluent_consumer"):
        (group,) = runs[name]
        if base_cpu:
            report.add(
                f"transport_{name}_vs_aiokafka_cpu",
                group.cpu_us_per_event / base_cpu,
                "x",
                "CPU per event over aiokafka's (the mean of its two runs): below 1 is cheaper",
            )
        if base_rate:
            report.add(
                f"transport_{name}_vs_aiokafka_throughput",
                group.per_second / base_rate,
                "x",
                "events/s over aiokafka's (the mean of its two runs)",
            )


async def _check(
    report: Report,
    name: str,
    group: GroupRun,
    *,
    stats: DatasetStats,
    records: int,
    database_url: str,
) -> None:
    """Every record consumed, each distinct event applied or judged stale once, none
    dead-lettered, the process exited 0 after going idle."""
    outcomes = {k: group.outcome(k) for k in ("applied", "stale", "deduplicated", "dead_lettered")}
    conn = await asyncpg.connect(database_url)
    try:
        handled = await conn.fetchval("SELECT count(*) FROM core.event_handled")
    finally:
        await conn.close()
    exits = [r.exit_code for r in group.runs]
    report.check(
        f"transports ({name}): every record consumed, each event applied once, exit 0",
        all(code == 0 for code in exits)
        and group.records == records
        and outcomes["dead_lettered"] == 0
        and outcomes["applied"] + outcomes["stale"] == len(stats.keys) == handled,
        f"exits {exits}; {group.records:,} consumed of {records:,}; {outcomes}; "
        f"{handled:,} dedup rows for {len(stats.keys):,} distinct events",
    )
