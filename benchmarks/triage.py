"""The rule-candidates consumer over one pre-filled topic, against its ceilings, its baseline and
its peers.

Order of the stages (all on the same topic and data, one run):

1. fill the topic (6 partitions, keyed by cluster_id);
2. raw drains (aiokafka and confluent-kafka, alternated) and the durable ceiling;
3. first pass: ``spectral consume rule-candidates`` into an empty database (+ RSS, CPU);
4. second pass: a fresh group into the same database — every record is a duplicate;
5. the peers (FastStream, quix-streams), each into an empty database of its own;
6. naive consumer (baseline) on a prefix, into an empty database of its own;
7. scaling: 1, 2 and 3 processes in one group, each series into an empty database (the single
   process again: with the first pass it brackets the peers, whose ratios use their mean).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from benchmarks import peers
from benchmarks.baselines import Throughput, confluent_drain, durable_ceiling, naive, raw_drain
from benchmarks.dataset import (
    DatasetSpec,
    DatasetStats,
    DecodeCost,
    decode_cost,
    generate,
    verify_sample,
)
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
    decode: DecodeCost

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
    cost = decode_cost(records)
    published = await publish(stack.endpoints.kafka_bootstrap, name, options.partitions, records)
    del records
    report.notes.append(
        f"data: {stats.records:,} records on {options.partitions} partitions, "
        f"{len(stats.clusters_touched):,} clusters, mean {stats.mean_bytes:,.0f} B/record "
        f"(1-3 evidence items, 2 on average: the contract's realistic 10-item record is "
        f"~1.8 KB), {stats.kinds.get('duplicate', 0):,} duplicates, "
        f"{stats.kinds.get('stale', 0):,} stale snapshots; generated in {generated:.1f} s "
        f"({checked} decoded with the contract's registry), published in {published.seconds:.1f} s"
    )
    return Topic(name, published.end_offsets, stats, cost)


async def shared_topic(stack: BenchStack, options: Options, report: Report) -> Topic:
    """The run's pre-filled topic: filled by the first stage that needs it, reused after."""
    topic = stack.shared.get("triage_topic")
    if not isinstance(topic, Topic):
        topic = await fill(stack, options, report)
        stack.shared["triage_topic"] = topic
    return topic


@dataclass(frozen=True)
class Stage:
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
    topic = await shared_topic(stack, options, report)
    servers = await stack.servers()
    stage = Stage(stack, options, report, topic, options.log_dir / stack.run_id, servers)
    drain_rate, drain_cpu = await _raw_drains(stage)
    lean_cpu = await _lean_drains(stage)
    ceiling_rate = await _durable_ceiling(stage)

    first_db = await stack.database("first")
    first = await stage.consumers("first pass", "first", 1, first_db, fresh=True)
    _first_pass_figures(report, first, servers)
    _cpu_breakdown(report, first, topic.decode, drain_cpu, lean_cpu)
    await check_newest(stage, "first pass", first_db, "platform.rule_candidates_pending")
    second = await stage.consumers("second pass", "second", 1, first_db, fresh=False)
    report.add(
        "consumer_all_duplicates",
        second.per_second,
        "events/s",
        f"same topic, fresh group, same database: 100% duplicates; "
        f"{second.cpu_us_per_event:.0f} us CPU/event",
    )
    report.add(
        "consumer_all_duplicates_cpu_per_event",
        second.cpu_us_per_event,
        "us",
        "consumer process CPU per event when every record is a duplicate (the contract check "
        "and the dedup claim, nothing applied)",
    )
    if servers.postmaster is not None:
        report.add(
            "postgres_all_duplicates_cpu_per_event",
            second.server_us_per_event()[0],
            "us",
            "this database's PostgreSQL CPU per event when every record is a duplicate",
        )
    peers = await _peers(stage)
    baseline = await _naive(stage)
    scaling = await _scaling(stage, first)
    if options.compare is not None:
        await _compare(stage, options.compare)

    singles = [first, *([scaling[1]] if 1 in scaling and scaling[1] is not first else [])]
    spectral = statistics.fmean(g.per_second for g in singles)
    ratio_naive = first.per_second / baseline.per_second if baseline.per_second else 0.0
    ratio_drain = first.per_second / drain_rate if drain_rate else 0.0
    ratio_ceiling = first.per_second / ceiling_rate if ceiling_rate else 0.0
    ratio_dupes = second.per_second / first.per_second if first.per_second else 0.0
    report.add("consumer_vs_naive", ratio_naive, "x")
    report.add("consumer_vs_raw_drain", ratio_drain, "x")
    report.add("consumer_vs_durable_ceiling", ratio_ceiling, "x", "first pass / durable ceiling")
    report.add("all_duplicates_vs_first_pass", ratio_dupes, "x")
    report.target("consumer / naive", ratio_naive, ">= 10x", ratio_naive >= 10)
    report.target("consumer / raw drain", ratio_drain, ">= 0.5x", ratio_drain >= 0.5)
    report.target("consumer / durable ceiling", ratio_ceiling, ">= 0.6x", ratio_ceiling >= 0.6)
    report.target("all-duplicates / first pass", ratio_dupes, ">= 1.5x", ratio_dupes >= 1.5)
    runs = ", ".join(f"{g.per_second:,.0f}" for g in singles)
    goals = {"faststream": 1.5, "quix": 1.0, "quix_guaranteed": 1.5}
    for name, peer in peers.items():
        ratio = spectral / peer.run.per_second if peer.run.per_second else 0.0
        goal = goals.get(name, 1.0)
        report.add(
            f"consumer_vs_peer_{name}",
            ratio,
            "x",
            f"mean of spectral's single-process runs ({runs} events/s) / the peer's",
        )
        report.target(
            f"consumer / peer {name}"
            + (" (on a quiet machine, load < 2)" if name == "quix" else ""),
            ratio,
            f">= {goal}x",
            ratio >= goal,
        )
        if first.cpu_us_per_event:
            report.add(
                f"consumer_vs_peer_{name}_cpu",
                peer.run.cpu_us_per_event / first.cpu_us_per_event,
                "x",
                "the peer's CPU per event / spectral's (first pass): events per core-second, "
                "spectral over the peer — steadier than the rates on a busy shared machine, "
                "where a process with more threads (librdkafka's) takes a larger share of it",
            )
    _system_cpu(report, first, peers, servers)
    run = first.runs[0]
    report.target(
        "consumer CPU per event (us)", first.cpu_us_per_event, "<= 15", first.cpu_us_per_event <= 15
    )
    report.target("consumer peak RSS (MiB)", run.peak_rss_mib, "< 200", run.peak_rss_mib < 200)
    growth = run.rss_growth_mib()
    report.target("consumer RSS growth Q1->Q4 (MiB)", growth, "< 10 (no trend)", growth < 10)


def _system_cpu(
    report: Report, first: GroupRun, peers: dict[str, PeerRun], servers: Servers
) -> None:
    """Whole-system CPU per event (the consumer's process + its database's PostgreSQL), spectral
    against quix-streams, and PostgreSQL's share against its target."""
    if servers.postmaster is None:
        return
    postgres_us, _ = first.server_us_per_event()
    report.target("PostgreSQL CPU per event (us)", postgres_us, "<= 10", postgres_us <= 10)
    system = first.cpu_us_per_event + postgres_us
    report.add(
        "system_cpu_per_event",
        system,
        "us",
        f"consumer {first.cpu_us_per_event:.1f} + PostgreSQL {postgres_us:.1f}, first pass",
    )
    whole = {
        name: peer.run.cpu_us_per_event + peer.run.server_us_per_event()[0]
        for name, peer in peers.items()
    }
    for name, value in whole.items():
        report.add(
            f"peer_{name}_system_cpu_per_event",
            value,
            "us",
            "the peer's process + its database's PostgreSQL CPU per event",
        )
    if "quix" in whole and "quix_guaranteed" in whole:
        report.add(
            "guarantees_cost_in_quix",
            whole["quix_guaranteed"] - whole["quix"],
            "us",
            "whole-system CPU per event the dedup table and newest-snapshot-wins add to "
            "quix-streams (the same-guarantee peer less the plain one)",
        )
    if "quix_guaranteed" in whole:
        report.add(
            "spectral_beyond_quix_guaranteed",
            system - whole["quix_guaranteed"],
            "us",
            "whole-system CPU per event spectral spends beyond the same-guarantee quix-streams "
            "peer: the contract check, dead letters, pipelining, operator columns, metrics "
            "(negative: spectral is cheaper)",
        )
    quix = peers.get("quix")
    if quix is None or not system:
        return
    quix_postgres, _ = quix.run.server_us_per_event()
    quix_system = whole["quix"]
    ratio = quix_system / system
    report.add(
        "consumer_vs_peer_quix_system_cpu",
        ratio,
        "x",
        f"quix-streams' consumer + PostgreSQL CPU per event ({quix.run.cpu_us_per_event:.1f} + "
        f"{quix_postgres:.1f} us) / spectral's ({system:.1f} us): >= 1 is spectral no dearer",
    )
    report.target("whole-system CPU per event vs quix-streams", ratio, ">= 1x", ratio >= 1)


_ROOT = Path(__file__).resolve().parents[1]
"""The checkout (the lean drain runs as ``python -m benchmarks.leandrain`` from it)."""


async def _lean_drains(stage: Stage) -> float | None:
    """The Kafka client's CPU per event as ``spectral consume`` runs it (light records, fetch
    responses read whole, uvloop; ``benchmarks/leandrain.py``, a process of its own), median of
    ``drain_repeats`` drains of the topic; None (and a note) if a drain failed."""
    topic = stage.topic
    cpus: list[float] = []
    for _ in range(stage.options.drain_repeats):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "benchmarks.leandrain",
            stage.stack.endpoints.kafka_bootstrap,
            topic.name,
            json.dumps(topic.ends),
            str(stage.options.limit()),
            cwd=_ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
        lines = out.decode().strip().splitlines()
        if proc.returncode != 0 or not lines:
            stage.report.notes.append(
                f"lean drain failed (exit {proc.returncode}): {err.decode()[-300:]}"
            )
            return None
        drained = json.loads(lines[-1])
        cpus.append(float(drained["cpu"]) / max(1, int(drained["events"])) * 1e6)
    return statistics.median(cpus) if cpus else None


async def _raw_drains(stage: Stage) -> tuple[float, float]:
    """The ceiling without a database, with aiokafka and with confluent-kafka (librdkafka),
    alternated; cheap to measure, so the median of three steadies each on a noisy box.
    Returns aiokafka's rate and CPU per event."""
    topic = stage.topic
    bootstrap = stage.stack.endpoints.kafka_bootstrap
    drains: dict[str, list[tuple[float, float, float]]] = {"aiokafka": [], "confluent": []}
    for _ in range(stage.options.drain_repeats):
        for client, runs in drains.items():
            before = machine_sample()
            if client == "aiokafka":
                drain = await raw_drain(
                    bootstrap, topic.name, topic.ends, limit_seconds=stage.options.limit()
                )
            else:
                drain = await asyncio.to_thread(
                    confluent_drain,
                    bootstrap,
                    topic.name,
                    topic.ends,
                    limit_seconds=stage.options.limit(),
                )
            busy = busy_fraction(before, machine_sample())
            runs.append((drain.per_second, drain.cpu_us_per_event, busy))
    rates: dict[str, float] = {}
    cpus: dict[str, float] = {}
    for client, runs in drains.items():
        rate, _, busy = statistics.median_high(runs)
        cpu = statistics.median(r[1] for r in runs)
        suffix = "" if client == "aiokafka" else "_confluent"
        stage.report.add(
            f"raw_drain{suffix}",
            rate,
            "events/s",
            f"median of {len(runs)}: {client} + json.loads, the engine's fetch settings; "
            f"machine {busy:.0%} busy",
        )
        stage.report.add(
            f"raw_drain{suffix}_cpu_per_event",
            cpu,
            "us",
            f"{client} drain: the benchmark process's CPU (every thread), median",
        )
        rates[client] = rate
        cpus[client] = cpu
    return rates["aiokafka"], cpus["aiokafka"]


async def _durable_ceiling(stage: Stage) -> float:
    """The raw drain + a batched COPY per fetch and the offset commit; median of three."""
    db = await stage.stack.database("ceiling")
    runs: list[tuple[float, float, float]] = []
    for repeat in range(stage.options.drain_repeats):
        before = machine_sample()
        ceiling = await durable_ceiling(
            stage.stack.endpoints.kafka_bootstrap,
            stage.topic.name,
            stage.topic.ends,
            db,
            group=f"bench-{stage.stack.run_id}-ceiling-{repeat}",
            limit_seconds=stage.options.limit(),
        )
        busy = busy_fraction(before, machine_sample())
        runs.append((ceiling.per_second, ceiling.cpu_us_per_event, busy))
        stage.report.check(
            f"durable ceiling #{repeat + 1}: every record copied",
            ceiling.events == stage.topic.records,
            f"{ceiling.events:,} of {stage.topic.records:,}",
        )
    rate, cpu, busy = statistics.median_high(runs)
    stage.report.add(
        "durable_ceiling",
        rate,
        "events/s",
        f"median of {len(runs)}: raw drain + per fetch (<= 2,000) one COPY into a plain table "
        f"and the offset commit; {cpu:.1f} us CPU/event in the benchmark process; "
        f"machine {busy:.0%} busy",
    )
    return rate


PEER_TABLE = "rule_candidates_peer"
PEER_HANDLED = "peer_event_handled"
_PEER_COLUMNS = """
    cluster_id          uuid PRIMARY KEY,
    snapshot_hash       text NOT NULL,
    rule_id             uuid NOT NULL,
    workspace_id        uuid NOT NULL,
    severity            text NOT NULL,
    failure_count       bigint NOT NULL,
    first_observed_at   timestamptz NOT NULL,
    last_observed_at    timestamptz NOT NULL,
    evidence_bundle     jsonb NOT NULL,
    suggested_rule_stub text"""
_PEER_TABLE_DDL = {
    "quix": f"CREATE TABLE public.{PEER_TABLE} ({_PEER_COLUMNS})",
    "quix_guaranteed": (
        f"CREATE TABLE public.{PEER_TABLE} ({_PEER_COLUMNS},"
        "\n    ordered_at          timestamptz NOT NULL);"
        f"CREATE TABLE public.{PEER_HANDLED} (idempotency_key text PRIMARY KEY)"
    ),
}
"""The projection's data columns and types (platform.rule_candidates_pending without the
operator columns and the bookkeeping spectral adds), for a peer that writes its own table; the
same-guarantee peer adds the order it compares (``ordered_at``) and its dedup table, as a user
of quix-streams would write them."""

GIVES_UP = {
    "faststream": (
        "same dedup, order and table; no contract check beyond its pydantic model (hash, "
        "spellings, key), no dead letters (a record it cannot decode or apply fails its batch "
        "again and again), no pipelining"
    ),
    "quix": (
        "last write wins (stale snapshots overwrite newer ones), no dedup record, no contract "
        "check, no dead letters, a table of its own (its upsert sets every column it is given)"
    ),
    "quix_guaranteed": (
        "a dedup table and newest-snapshot-wins in its sink's transaction, like spectral; no "
        "contract check, no dead letters, a table of its own"
    ),
}


@dataclass(frozen=True)
class PeerRun:
    run: GroupRun
    stale: int
    """Clusters left at an older snapshot than the newest the topic carries."""


async def run_one_peer(stage: Stage, name: str, label: str) -> PeerRun | None:
    """Peer ``name`` over the whole topic into an empty database of its own (``label`` names the
    database, the group and the log), checked afterwards; None when it cannot run here."""
    topic, bootstrap = stage.topic, stage.stack.endpoints.kafka_bootstrap
    db = await stage.stack.database(label)
    group = f"bench-{stage.stack.run_id}-{label}"
    command: peers.PeerCommand | None
    if name == "faststream":
        command = peers.faststream(
            bootstrap=bootstrap,
            topic=topic.name,
            group=group,
            database_url=db,
            records=topic.records,
        )
        table = "platform.rule_candidates_pending"
    else:
        conn = await asyncpg.connect(db)
        try:
            await conn.execute(_PEER_TABLE_DDL[name])
        finally:
            await conn.close()
        common = {
            "bootstrap": bootstrap,
            "topic": topic.name,
            "group": group,
            "database_url": db,
            "table": PEER_TABLE,
            "records": topic.records,
        }
        command = (
            peers.quix(**common)  # type: ignore[arg-type]
            if name == "quix"
            else peers.quix_guaranteed(**common, handled=PEER_HANDLED)  # type: ignore[arg-type]
        )
        table = f"public.{PEER_TABLE}"
    if command is None:
        stage.report.notes.append(
            f"peer {name}: not run, {peers.PEERS_PYTHON} is missing (make bench creates it)"
        )
        return None
    run = await peers.run_peer(
        command,
        env=stage.stack.env(db),
        log_dir=stage.logs,
        limit_seconds=stage.options.limit(),
        servers=stage.servers,
        database_url=db,
        name=label,
    )
    stale = await _peer_checks(stage, name, run, db, table)
    return PeerRun(run, stale)


async def _peers(stage: Stage) -> dict[str, PeerRun]:
    """Each peer over the whole topic, into an empty database of its own."""
    found: dict[str, PeerRun] = {}
    for name in stage.options.peers:
        peer = await run_one_peer(stage, name, f"peer_{name}")
        if peer is None:
            continue
        run = peer.run
        postgres_us, _ = run.server_us_per_event()
        stage.report.add(
            f"peer_{name}",
            run.per_second,
            "events/s",
            f"{run.records:,} events; {run.cpu_us_per_event:.0f} us CPU/event"
            + (f", PostgreSQL {postgres_us:.0f} us/event" if stage.servers.postmaster else "")
            + f"; machine {run.machine_busy:.0%} busy; {GIVES_UP[name]}",
        )
        stage.report.add(
            f"peer_{name}_cpu_per_event",
            run.cpu_us_per_event,
            "us",
            "the peer's process (every thread: librdkafka's too), inside its window",
        )
        if stage.servers.postmaster:
            stage.report.add(
                f"peer_{name}_postgres_cpu_per_event",
                postgres_us,
                "us",
                "its database's PostgreSQL backends + server processes, inside its window",
            )
        stage.report.add(
            f"peer_{name}_stale_rows",
            peer.stale,
            "rows",
            f"clusters left at an older snapshot than the newest the topic carries, "
            f"of {len(stage.topic.stats.newest):,}",
        )
        found[name] = peer
    return found


async def _peer_checks(stage: Stage, name: str, run: GroupRun, db: str, table: str) -> int:
    topic = stage.topic
    stage.report.check(
        f"peer {name}: exited 0 after every record",
        all(r.exit_code == 0 for r in run.runs) and run.records == topic.records,
        f"exit {[r.exit_code for r in run.runs]}, {run.records:,} of {topic.records:,} records",
    )
    handled_table = {
        "faststream": "core.event_handled",
        "quix_guaranteed": f"public.{PEER_HANDLED}",
    }.get(name)
    conn = await asyncpg.connect(db)
    try:
        rows = await conn.fetchval(f"SELECT count(*) FROM {table}")
        handled = (
            await conn.fetchval(f"SELECT count(*) FROM {handled_table}") if handled_table else 0
        )
    finally:
        await conn.close()
    clusters = len(topic.stats.clusters_touched)
    stage.report.check(
        f"peer {name}: one row per cluster"
        + (", one dedup row per distinct event" if handled_table else ""),
        rows == clusters and (handled_table is None or handled == len(topic.stats.keys)),
        f"{rows:,} rows for {clusters:,} clusters; {handled:,} dedup rows",
    )
    stale = await _stale_rows(stage, db, table)
    if name == "quix_guaranteed":
        stage.report.check(
            f"peer {name}: every cluster holds its newest snapshot",
            stale == 0,
            f"{stale:,} of {len(topic.stats.newest):,} clusters at an older snapshot",
        )
    return stale


async def _stale_rows(stage: Stage, db: str, table: str) -> int:
    """Clusters whose row holds another snapshot than the newest the topic carries."""
    conn = await asyncpg.connect(db)
    try:
        rows = await conn.fetch(f"SELECT cluster_id::text, snapshot_hash FROM {table}")
    finally:
        await conn.close()
    held = {r[0]: r[1] for r in rows}
    newest = stage.topic.stats.newest
    return sum(1 for cluster, digest in newest.items() if held.get(cluster) != digest)


async def check_newest(stage: Stage, label: str, db: str, table: str) -> None:
    stale = await _stale_rows(stage, db, table)
    stage.report.check(
        f"{label}: every cluster holds its newest snapshot",
        stale == 0,
        f"{stale:,} of {len(stage.topic.stats.newest):,} clusters at an older snapshot",
    )


def _first_pass_figures(report: Report, first: GroupRun, servers: Servers) -> None:
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
    if servers.postmaster is not None:
        report.add(
            "postgres_cpu_per_event",
            postgres_us,
            "us",
            "this database's PostgreSQL backends + server processes, first pass; Kafka broker "
            + (f"{kafka_us:.1f} us/event" if servers.kafka is not None else "n/a"),
        )
        report.add(
            "postgres_kernel_cpu_per_event",
            first.postgres_kernel_us_per_event(),
            "us",
            "the kernel's part of postgres_cpu_per_event (system time: the write-ahead log's "
            "and new pages' writes into the page cache, ...)",
        )
    else:
        report.notes.append(
            "postgres_cpu_per_event: n/a (the database server does not run on this machine)"
        )
    run = first.runs[0]
    batches = sum(r.batches for r in first.runs)
    if batches:
        report.add(
            "consumer_mean_batch",
            first.records / batches,
            "records",
            "records per batch transaction, first pass (the consumer's batch log)",
        )
    report.add("consumer_peak_rss", run.peak_rss_mib, "MiB", "VmRSS, first pass")
    report.add(
        "consumer_rss_growth",
        run.rss_growth_mib(),
        "MiB",
        "median VmRSS of the last quarter minus the first quarter",
    )


def _cpu_breakdown(
    report: Report,
    first: GroupRun,
    cost: DecodeCost,
    drain_cpu: float,
    lean_cpu: float | None,
) -> None:
    """The consumer's CPU per event in three parts: the Kafka client, the decode step and the
    rest (the handler, asyncpg and the engine's bookkeeping). The Kafka client is the engine's
    own fetch path, alone in a process of its own (``lean_cpu``: light records, fetch responses
    read whole, uvloop, no decode); the aiokafka raw drain's CPU less its ``json.loads`` (full
    records, asyncio's loop) stays in the note. The decode is the engine's own, inside the
    consumer process (the ``decode_cpu`` of its batch log: the thread's CPU clock around each
    decode slice), where the process's loop, caches and allocator are those of the rest of its
    work; the same step measured in the benchmark process on the same records stays in the
    note."""
    total = first.cpu_us_per_event
    raw = max(0.0, drain_cpu - cost.loads_us)
    kafka = lean_cpu if lean_cpu is not None else raw
    fetch = (
        "the engine's fetch path alone in a process (light records, responses read whole, "
        f"uvloop, no decode); the aiokafka raw drain's CPU less json.loads {raw:.1f} us"
        if lean_cpu is not None
        else "aiokafka fetch (raw drain CPU less json.loads; the lean drain failed)"
    )
    records = sum(run.records for run in first.runs)
    inside = sum(run.decode_cpu for run in first.runs)
    decode = inside / records * 1e6 if records and inside else cost.decode_us
    where = (
        "inside the consumer process (its batch log's decode_cpu)"
        if records and inside
        else "in the benchmark process (the consumer logged no decode_cpu)"
    )
    rest = total - kafka - decode
    parts = (
        ("consumer_cpu_kafka_client", kafka, fetch),
        (
            "consumer_cpu_decode",
            decode,
            (
                "the engine's decode step per record as the rule-candidates consumer runs it "
                f"(the contract check of value and key, the view, the Delivery), {where}; in "
                f"the benchmark process {cost.decode_us:.1f} us (json.loads alone "
                f"{cost.loads_us:.1f} us)"
            ),
        ),
        ("consumer_cpu_rest", rest, "the handler, asyncpg, the engine: the total less the two"),
    )
    for name, value, note in parts:
        report.add(name, value, "us", f"{note}; of {total:.1f} us/event, first pass")


async def _naive(stage: Stage) -> Throughput:
    naive_db = await stage.stack.database("naive")
    baseline = await naive(
        stage.stack.endpoints.kafka_bootstrap,
        stage.topic.name,
        naive_db,
        group=f"bench-{stage.stack.run_id}-naive",
        limit=min(stage.options.naive_events, stage.topic.records),
        limit_seconds=min(stage.options.naive_seconds, stage.options.limit()),
    )
    stage.report.add(
        "naive_consumer",
        baseline.per_second,
        "events/s",
        f"first {baseline.events:,} events: one transaction + one offset commit per event",
    )
    return baseline


async def _scaling(stage: Stage, first: GroupRun) -> dict[int, GroupRun]:
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
    return scaling


async def _compare(stage: Stage, other: Path) -> None:
    """First passes of this checkout and of ``other``, alternated in mirrored pairs (this,
    other, other, this, ...) so drift on a shared machine hits both alike and neither side always
    runs first after the stage's earlier passes (with this side always first, its PostgreSQL CPU
    per event read 1.2-2.3 us higher in three A/Bs where in-process measures had it lower);
    medians of each."""
    runs: dict[str, list[GroupRun]] = {"this": [], "other": []}
    for index in range(2 * stage.options.compare_rounds):
        side = "this" if index % 4 in (0, 3) else "other"
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
        if stage.servers.postmaster:
            postgres = statistics.median_high(g.server_us_per_event()[0] for g in runs[side])
            stage.report.add(
                f"ab_{side}_postgres_cpu_per_event",
                postgres,
                "us",
                f"{label}: its database's PostgreSQL backends + server processes",
            )
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
