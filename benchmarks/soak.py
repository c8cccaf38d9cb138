"""The soak (stage ``soak``, ``make soak``): the whole pipeline for several minutes with pruning
on, the size of every table that grows with traffic sampled as it goes — each must level off
instead of growing with the traffic.

Producer → core.outbox → ``spectral outbox relay`` → Kafka → ``spectral consume rule-candidates``
→ core.event_handled, with a maintenance pass every few seconds. The producer writes snapshots of
``soak_clusters`` clusters at ``soak_rate`` events/s (a new snapshot of a cluster has a new
idempotency key) and, every batch, re-enqueues a few events it wrote a few seconds earlier, as a
producer re-sending after a crash would: the consumer must deduplicate every one of them.

The other traffic-growing tables get traffic of their own, written the way their writers write
it, and are pruned by the same maintenance passes (spectral/maintenance/retention.py): failures
ingested into FailureClusterService and ticked into snapshots (clusters.failures, pruned behind a
failure retention of 20 s, their rollups kept), dead letters the broker refused
(core.dead_letters, kept 20 s), redrive records of a dead-letter topic that keeps records 10 s
(core.dlq_redrives) and API tokens made and revoked (core.api_tokens, kept 20 s).

Time is compressed: the topic keeps records 10 s (segments of 5 s, timestamps at most 1 s
ahead), published outbox rows are kept 20 s, and the broker's retention check interval (5 min on
the shared broker, which would make the horizon ~6 minutes and the run half an hour) is counted
as 1 s. Nothing reads old records back here, so the shorter horizon changes how high the
plateau is, not the mechanism that keeps it flat. Figures: rows and bytes of both tables at each
third of the run, the rotations and truncations, and the deduplicated re-sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg

from benchmarks.options import Options
from benchmarks.processes import spectral_executable
from benchmarks.report import Report
from benchmarks.stack import BenchStack
from contracts import FAILURE_CLUSTER_DETECTED, EventEnvelope, failure_cluster_detected_event
from producers.clusters import ClusterPolicy, FailureClusterService
from producers.clusters.model import FailureObservation
from producers.clusters.retention import FailureRetention
from producers.clusters.severity import SeverityPolicy
from spectral.db.queries import load_queries
from spectral.kafka.retention import BrokerRetention, describe_retention
from spectral.maintenance.repository import MaintenanceRepository
from spectral.maintenance.retention import (
    DeadLetterTable,
    DescribeRetention,
    Redrives,
    RetentionTask,
    Tokens,
)
from spectral.maintenance.run import MaintenanceOptions, MaintenanceReport, maintain
from spectral.outbox.writer import OutboxItem, enqueue
from spectral.settings import load_settings

_SQL = load_queries(Path(__file__).with_name("soak.sql"))
TOPIC_CONFIGS = {
    "retention.ms": "10000",
    "segment.ms": "5000",
    "message.timestamp.after.max.ms": "1000",
}
CHECK_INTERVAL_MS = 1000
OPTIONS = MaintenanceOptions(
    outbox_retention=timedelta(seconds=20),
    grace=timedelta(seconds=2),
    lock_timeout=timedelta(seconds=2),
    delay_margin=timedelta(seconds=5),
)
RETENTION = timedelta(seconds=20)
CLUSTER_POLICY = ClusterPolicy(
    severity=SeverityPolicy(rate_window=timedelta(seconds=5)),
    generate_stubs=False,
    failure_retention=RETENTION,
)
FAILURES_PER_SECOND = 200
FAILURE_CLUSTERS = 50
SIDE_ROWS_PER_SECOND = 20
"""Dead letters, redrive records and tokens each get this many rows a second."""
MAINTENANCE_EVERY = 3.0
SAMPLE_EVERY = 5.0
BATCH_PER_SECOND = 10
RESEND_FRACTION = 0.05
T0 = datetime(2026, 11, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Sample:
    at: float
    handled_rows: int
    handled_bytes: int
    outbox_rows: int
    outbox_bytes: int
    unpublished: int
    tables: dict[str, tuple[int, int]] = field(default_factory=dict)
    """The retention tasks' tables: rows, bytes."""


@dataclass
class Soak:
    samples: list[Sample] = field(default_factory=list)
    produced: int = 0
    resent: int = 0
    rotations: int = 0
    forgotten_rows: int = 0
    outbox_truncations: int = 0
    pruned_rows: int = 0
    maintenance_seconds: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    written: dict[str, int] = field(default_factory=dict)
    """Rows written per retention table over the run."""
    retained: dict[str, int] = field(default_factory=dict)
    """Rows pruned per retention table over the run."""
    snapshots: int = 0
    """Snapshots the cluster service's ticks put in the outbox (events too)."""

    def wrote(self, table: str, rows: int) -> None:
        self.written[table] = self.written.get(table, 0) + rows


def _snapshot(cluster: uuid.UUID, seq: int) -> EventEnvelope[Any]:
    return failure_cluster_detected_event(
        cluster_id=cluster,
        rule_id=uuid.UUID(int=1),
        workspace_id=uuid.UUID(int=2),
        severity="low",
        failure_count=seq,
        first_observed_at=T0,
        last_observed_at=T0 + timedelta(seconds=seq),
        evidence_bundle=[],
    )


async def _produce(url: str, options: Options, soak: Soak, stop: asyncio.Event) -> None:
    conn = await asyncpg.connect(url)
    clusters = [uuid.uuid4() for _ in range(options.soak_clusters)]
    per_batch = max(1, options.soak_rate // BATCH_PER_SECOND)
    seq = 0
    recent: list[OutboxItem] = []
    try:
        while not stop.is_set():
            started = time.monotonic()
            items = []
            for _ in range(per_batch):
                cluster = clusters[seq % len(clusters)]
                seq += 1
                items.append(OutboxItem(_snapshot(cluster, seq // len(clusters) + 1), str(cluster)))
            resend = recent[: int(per_batch * RESEND_FRACTION)]
            async with conn.transaction():
                await enqueue(conn, items + resend)
            soak.produced += len(items)
            soak.resent += len(resend)
            recent = (recent + items)[-per_batch * 2 * BATCH_PER_SECOND :]
            await asyncio.sleep(max(0.0, 1 / BATCH_PER_SECOND - (time.monotonic() - started)))
    finally:
        await conn.close()


async def _maintain(
    url: str, bootstrap: str, topics: Sequence[str], soak: Soak, stop: asyncio.Event
) -> None:
    settings = load_settings()

    async def describe(names: Sequence[str]) -> BrokerRetention:
        found = await describe_retention(settings, bootstrap, names)
        return replace(found, check_interval_ms=min(found.check_interval_ms, CHECK_INTERVAL_MS))

    tasks = retention_tasks(describe)
    while not stop.is_set():
        repo = await MaintenanceRepository.open(url)
        try:
            report: MaintenanceReport = await maintain(
                repo, {"rule-candidates": list(topics)}, describe, OPTIONS, retention=tasks
            )
        finally:
            await repo.close()
        soak.maintenance_seconds.append(report.seconds)
        soak.errors += [e for e in (report.outbox.error, report.dedup.error) if e]
        soak.errors += [f"{t}: {e}" for t, e in report.retention_errors.items()]
        for pruned in report.retention:
            soak.retained[pruned.table] = soak.retained.get(pruned.table, 0) + pruned.rows
        if report.dedup.forgotten_generation is not None:
            soak.rotations += 1
            soak.forgotten_rows += report.dedup.forgotten_rows
        soak.outbox_truncations += len(report.outbox.pruned)
        soak.pruned_rows += sum(report.outbox.pruned.values())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), MAINTENANCE_EVERY)


def retention_tasks(describe: DescribeRetention) -> list[RetentionTask]:
    """Every retention task `spectral maintenance` runs, with the soak's short horizons."""
    return [
        DeadLetterTable(RETENTION),
        Redrives(describe, OPTIONS.grace),
        Tokens(RETENTION),
        FailureRetention(CLUSTER_POLICY, every=timedelta(0)),
    ]


RETENTION_TABLES = (
    "core.dead_letters",
    "core.dlq_redrives",
    "core.api_tokens",
    "clusters.failures",
)


async def _failures(url: str, soak: Soak, stop: asyncio.Event) -> None:
    """Failures into the cluster service (a fixed set of clusters and summaries, observed now),
    a tick a second: snapshots into the outbox, as `spectral clusters ingest` and `tick` do."""
    n = 0
    async with FailureClusterService.connect(url, policy=CLUSTER_POLICY, role=None) as service:
        while not stop.is_set():
            started = time.monotonic()
            now = datetime.now(UTC)
            batch = []
            for _ in range(FAILURES_PER_SECOND):
                n += 1
                cluster = n % FAILURE_CLUSTERS
                batch.append(
                    FailureObservation(
                        failure_id=f"soak-{n}",
                        rule_id=uuid.UUID(int=0x50A4 << 64 | cluster),
                        workspace_id=uuid.UUID(int=3),
                        observed_at=now,
                        summary=f"check {n % 7} failed",
                        signature=f"soak-{cluster}",
                    )
                )
            result = await service.ingest(batch)
            soak.wrote("clusters.failures", result.inserted)
            tick = await service.tick()
            soak.snapshots += tick.published
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - started)))


async def _side_tables(url: str, dlq_topic: str, soak: Soak, stop: asyncio.Event) -> None:
    """Dead letters the broker refused, redrive records and revoked tokens, as their writers
    (the engine's fallback, `spectral dlq redrive`, `spectral tokens`) write them."""
    conn = await asyncpg.connect(url)
    n = 0
    try:
        while not stop.is_set():
            started = time.monotonic()
            rows = range(n, n + SIDE_ROWS_PER_SECOND)
            n += SIDE_ROWS_PER_SECOND
            async with conn.transaction():
                await conn.executemany(_SQL["dead_letter"], [(i,) for i in rows])
                await conn.executemany(
                    _SQL["redrive"], [(dlq_topic, i, dlq_topic[:-4]) for i in rows]
                )
                await conn.executemany(
                    _SQL["revoked_token"],
                    [(uuid.uuid4(), f"soak-{i}", f"{i:064x}") for i in rows],
                )
            for table in ("core.dead_letters", "core.dlq_redrives", "core.api_tokens"):
                soak.wrote(table, SIDE_ROWS_PER_SECOND)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, 1.0 - (time.monotonic() - started)))
    finally:
        await conn.close()


_SIZES = """
SELECT
    (SELECT count(*) FROM core.event_handled) AS handled_rows,
    (SELECT sum(pg_total_relation_size(inhrelid)) FROM pg_inherits
      WHERE inhparent = 'core.event_handled'::regclass) AS handled_bytes,
    (SELECT count(*) FROM core.outbox) AS outbox_rows,
    (SELECT sum(pg_total_relation_size(inhrelid)) FROM pg_inherits
      WHERE inhparent = 'core.outbox'::regclass) AS outbox_bytes,
    (SELECT count(*) FROM core.outbox WHERE published_at IS NULL) AS unpublished
"""


async def _sample(url: str, soak: Soak, stop: asyncio.Event, started: float) -> None:
    conn = await asyncpg.connect(url)
    try:
        while not stop.is_set():
            row = await conn.fetchrow(_SIZES)
            assert row is not None
            tables = {}
            for table in RETENTION_TABLES:
                measured = await conn.fetchrow(_SQL["table_size"].format(table=table))
                assert measured is not None
                tables[table] = (int(measured["rows"]), int(measured["bytes"]))
            soak.samples.append(
                Sample(
                    time.monotonic() - started,
                    int(row["handled_rows"]),
                    int(row["handled_bytes"]),
                    int(row["outbox_rows"]),
                    int(row["outbox_bytes"]),
                    int(row["unpublished"]),
                    tables,
                )
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), SAMPLE_EVERY)
    finally:
        await conn.close()


async def _spawn(stack: BenchStack, url: str, log: Path, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        spectral_executable(),
        *args,
        env=stack.env(url),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=log.open("wb"),
    )


def _consumer_counts(log: Path) -> dict[str, int]:
    for line in reversed(log.read_text(errors="replace").splitlines()):
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if entry.get("event") == "consumer stopped":
                return {k: int(entry.get(k, 0)) for k in ("applied", "stale", "deduplicated")}
    return {}


async def run_soak(stack: BenchStack, options: Options, report: Report) -> None:
    url = await stack.database("soak")
    topic = stack.topic_prefix + FAILURE_CLUSTER_DETECTED
    await stack.create_topic(topic, 3, configs=TOPIC_CONFIGS)
    dlq = topic + ".dlq"  # the redrive records' topics keep records as briefly
    await stack.create_topic(dlq, 1, configs=TOPIC_CONFIGS)
    logs = options.log_dir / stack.run_id
    logs.mkdir(parents=True, exist_ok=True)
    soak = Soak()
    stop = asyncio.Event()
    started = time.monotonic()
    relay = await _spawn(stack, url, logs / "soak-relay.log", "outbox", "relay")
    consumer = await _spawn(
        stack,
        url,
        logs / "soak-consumer.log",
        "consume",
        "rule-candidates",
        "--stop-when-idle",
        "15",
    )
    tasks = [
        asyncio.create_task(_produce(url, options, soak, stop)),
        asyncio.create_task(_maintain(url, stack.endpoints.kafka_bootstrap, [topic], soak, stop)),
        asyncio.create_task(_sample(url, soak, stop, started)),
        asyncio.create_task(_failures(url, soak, stop)),
        asyncio.create_task(_side_tables(url, dlq, soak, stop)),
    ]
    try:
        await asyncio.sleep(options.soak_seconds)
    finally:
        stop.set()
        for outcome in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(outcome, BaseException):
                soak.errors.append(f"{type(outcome).__name__}: {outcome}"[:300])
        await asyncio.sleep(5)  # the relay publishes what is left
        relay.send_signal(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(relay.wait(), 30)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(consumer.wait(), 60)
        for proc in (relay, consumer):
            if proc.returncode is None:
                proc.kill()
    _report(report, options, soak, _consumer_counts(logs / "soak-consumer.log"))


def _levels_off(peaks: Sequence[int]) -> bool:
    """The last third's peak is within 1.25x of the highest peak before it: a table that grows
    with the traffic keeps setting new peaks; one that levels off only oscillates (a prune every
    few seconds) around its plateau."""
    return peaks[2] <= 1.25 * max(peaks[0], peaks[1])


def _third(samples: Sequence[Sample], index: int) -> list[Sample]:
    size = max(1, len(samples) // 3)
    return list(samples[index * size : (index + 1) * size]) or list(samples[-1:])


def _report(report: Report, options: Options, soak: Soak, counts: dict[str, int]) -> None:
    samples = soak.samples
    if not samples:
        report.check("soak: table sizes were sampled", ok=False, detail="no sample")
        return
    for name, rows, size in (
        ("event_handled", "handled_rows", "handled_bytes"),
        ("outbox", "outbox_rows", "outbox_bytes"),
    ):
        peaks = [max(getattr(s, rows) for s in _third(samples, i)) for i in range(3)]
        bytes_peaks = [max(getattr(s, size) for s in _third(samples, i)) for i in range(3)]
        report.add(
            f"soak_{name}_rows",
            peaks[2],
            "rows",
            f"peak per third of the run: {peaks[0]:,} / {peaks[1]:,} / {peaks[2]:,}; bytes "
            + " / ".join(f"{b / 1024 / 1024:,.1f} MiB" for b in bytes_peaks),
        )
        report.check(
            f"soak: {name} levels off (last third's peak <= 1.25x the earlier thirds')",
            _levels_off(peaks),
            f"{max(peaks[:2]):,} then {peaks[2]:,} rows",
        )
    for table in RETENTION_TABLES:
        peaks = [max(s.tables[table][0] for s in _third(samples, i)) for i in range(3)]
        bytes_peaks = [max(s.tables[table][1] for s in _third(samples, i)) for i in range(3)]
        written, pruned = soak.written.get(table, 0), soak.retained.get(table, 0)
        report.add(
            f"soak_{table.replace('.', '_')}_rows",
            peaks[2],
            "rows",
            f"peak per third of the run: {peaks[0]:,} / {peaks[1]:,} / {peaks[2]:,}; bytes "
            + " / ".join(f"{b / 1024 / 1024:,.1f} MiB" for b in bytes_peaks)
            + f"; {written:,} rows written, {pruned:,} pruned",
        )
        report.check(
            f"soak: {table} levels off (last third's peak <= 1.25x the earlier thirds') while "
            "it is written and pruned",
            _levels_off(peaks) and written > 2 * peaks[2] and pruned > 0,
            f"{max(peaks[:2]):,} then {peaks[2]:,} rows; {written:,} written, {pruned:,} pruned",
        )
    total = soak.produced + soak.resent
    report.add(
        "soak_events",
        soak.produced / options.soak_seconds,
        "events/s",
        f"{soak.produced:,} events over {options.soak_seconds:.0f} s, {soak.resent:,} re-sent "
        f"({total:,} outbox rows); {soak.rotations} dedup rotations forgetting "
        f"~{soak.forgotten_rows:,} rows, {soak.outbox_truncations} outbox generations emptied "
        f"(~{soak.pruned_rows:,} rows); maintenance pass median "
        f"{sorted(soak.maintenance_seconds)[len(soak.maintenance_seconds) // 2] * 1000:.0f} ms",
    )
    report.check(
        "soak: the dedup record rotated and the outbox was pruned, without errors",
        soak.rotations >= 2 and soak.outbox_truncations >= 2 and not soak.errors,
        f"{soak.rotations} rotations, {soak.outbox_truncations} truncations, errors {soak.errors}",
    )
    consumed = sum(counts.values())
    report.check(
        "soak: every event applied or stale once, every re-send deduplicated",
        bool(counts)
        and counts["applied"] + counts["stale"] == soak.produced + soak.snapshots
        and counts["deduplicated"] >= soak.resent,
        f"consumer {counts}; {consumed:,} consumed for {soak.produced:,} events, "
        f"{soak.snapshots:,} snapshots of the cluster service and {soak.resent:,} re-sends",
    )
