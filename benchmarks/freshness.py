"""Freshness (stage ``freshness``): end-to-end latency at a steady offered load.

A producer inside the benchmark writes failure-cluster snapshots into ``core.outbox`` at
``freshness_rate`` events/s (default 2,000: a transaction of 20 every 10 ms, acting as
``spectral_producer``, the records of the triage stage's generator; above 2,500 events/s the rate
is split over several writer connections, each with its own clusters), then at
``freshness_high_rate`` (default 10,000, four writers of 25 rows every 10 ms; a writer whose
commit outlasted its tick writes what the schedule owes in its next transaction); the rate the
writers reached is reported (``freshness*_offered``) and a window below 90 % of its rate does
not count for its target; ``spectral outbox relay``
and ``spectral consume rule-candidates`` run as processes with their metrics served. After a
warm-up, the window's observations are read from the two processes' histograms (a scrape at each
end of the window, subtracted):

* ``spectral_consumer_freshness_seconds`` (the consumer): from a row's write into the outbox
  (the ``outbox.ready_at`` header the relay adds, the database's clock) to the commit of the
  transaction that applied it — end-to-end freshness;
* ``spectral_outbox_relay_delay_seconds`` (the relay): from the same write to Kafka's ack;
* the floor: an idle aiokafka consumer in the benchmark (no database, no decoding) notes, for
  every record it fetches in the window, the time since its ``outbox.ready_at`` — what the
  relay, the broker and a fetch cost on this machine at this moment, before any consumer work.

Each window's database is dropped when the window ends, and the run drops a stage's databases
before the next stage: autovacuum of the 200,000-row triage passes and of the previous window's
outbox would otherwise run inside this stage's windows (seen going through the contention
stage's tables during the 10k window; on a quiet machine the stage alone gave a 10k p99 of 74 and
94 ms, right after the triage and contention stages 226 ms).

p50 and p99 are interpolated inside the histogram's buckets, as Prometheus' histogram_quantile
does. The relay runs twice: sleeping on LISTEN/NOTIFY (the default) and polling only
(``--no-listen``), so the run shows what the wake-up buys. CPU of the relay and the consumer per
event at this load comes from /proc.

First, the relay's own ceiling (``relay_drain``): a running relay, idle, finds 50,000 rows
committed at once; from that commit to the last row marked, with the relay's CPU per event.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import statistics
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
from aiokafka import AIOKafkaConsumer
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.dataset import DatasetSpec, Record, generate
from benchmarks.options import Options
from benchmarks.processes import (
    BACKENDS,
    MachineSample,
    ServerSample,
    _cpu_seconds,
    busy_fraction,
    machine_sample,
    server_cpu,
    spectral_executable,
)
from benchmarks.report import Report
from benchmarks.stack import BenchStack
from contracts import FAILURE_CLUSTER_DETECTED
from spectral.db.queries import load_queries
from spectral.kafka.freshness import ready_at
from spectral.outbox import writer

TICK = 0.01
"""One producer transaction every 10 ms (each writer)."""
WRITER_RATE = 2_500
"""Events/s one writer connection offers at most: a higher rate is split over several writers,
each with the records of its own clusters (a cluster's snapshots stay in order), so a slow
round trip of one does not cut the offered load."""
CATCH_UP = 10
"""A late writer writes at most this many ticks' worth of records in one transaction."""
WARM_UP = 5.0
_LOW_RATE = 2_000
_HELD = 0.9
"""A window whose writers offered less than this share of the rate does not count for its
target (the machine could not produce the load, so the figure is not at that rate)."""
"""Up to this offered load (events/s) freshness p99 must stay under 50 ms, above it 100."""
CONSUMER_HISTOGRAM = "spectral_consumer_freshness_seconds"
RELAY_HISTOGRAM = "spectral_outbox_relay_delay_seconds"
_ENQUEUE = load_queries(Path(writer.__file__).with_name("writer.sql"))["enqueue"]
"""The writers' own statement (spectral/outbox/writer.py), fed records encoded in advance."""


@dataclass(frozen=True)
class Histogram:
    """Cumulative bucket counts by upper bound (``inf`` last)."""

    buckets: tuple[tuple[float, float], ...]

    @property
    def count(self) -> float:
        return self.buckets[-1][1] if self.buckets else 0.0

    def minus(self, earlier: Histogram) -> Histogram:
        before = dict(earlier.buckets)
        return Histogram(tuple((le, n - before.get(le, 0.0)) for le, n in self.buckets))

    def quantile(self, q: float) -> float:
        """histogram_quantile: linear inside the bucket holding rank q·count (seconds)."""
        total = self.count
        if total <= 0:
            return float("nan")
        rank = q * total
        lower, below = 0.0, 0.0
        for le, cumulative in self.buckets:
            if cumulative >= rank:
                if le == float("inf"):
                    return lower  # beyond the largest bound: report that bound
                inside = cumulative - below
                return lower + (le - lower) * ((rank - below) / inside if inside else 1.0)
            lower, below = le, cumulative
        return lower


def parse_histogram(text: str, name: str) -> Histogram:
    for family in text_string_to_metric_families(text):
        if family.name != name:
            continue
        buckets = sorted(
            (float(s.labels["le"]), s.value) for s in family.samples if s.name == f"{name}_bucket"
        )
        return Histogram(tuple(buckets))
    return Histogram(())


@dataclass
class _Process:
    name: str
    proc: asyncio.subprocess.Process
    port: int

    async def scrape(self, metric: str) -> Histogram:
        async with httpx.AsyncClient(timeout=5) as client:
            response = await client.get(f"http://127.0.0.1:{self.port}/metrics")
        return parse_histogram(response.text, metric)

    def cpu(self) -> float:
        return _cpu_seconds(Path(f"/proc/{self.proc.pid}/stat")) or 0.0

    async def stop(self) -> int:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(self.proc.wait(), 20)
        except TimeoutError:
            self.proc.kill()
            return await self.proc.wait()


async def _enqueue(conn: asyncpg.Connection, records: Sequence[Record]) -> None:
    """Write ``records`` into the outbox as the producer does (writer.sql ``enqueue``)."""
    await conn.fetch(
        _ENQUEUE,
        [FAILURE_CLUSTER_DETECTED] * len(records),
        [r.key.decode() for r in records],
        [r.idempotency_key for r in records],
        [r.value for r in records],
        [None] * len(records),
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


READY_SECONDS = 60.0
"""How long a spawned process has to answer ``/readyz`` with 200."""


async def _spawn(
    stack: BenchStack, url: str, prefix: str, log: Path, name: str, *args: str
) -> _Process:
    port = _free_port()
    proc = await asyncio.create_subprocess_exec(
        spectral_executable(),
        *args,
        "--metrics-port",
        str(port),
        env=stack.env(url, topic_prefix=prefix),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=log.open("wb"),
    )
    process = _Process(name, proc, port)
    try:
        deadline = time.monotonic() + READY_SECONDS
        async with httpx.AsyncClient(timeout=5) as client:
            while time.monotonic() < deadline and proc.returncode is None:
                with contextlib.suppress(httpx.HTTPError):
                    ready = await client.get(f"http://127.0.0.1:{port}/readyz")
                    if ready.status_code == 200:  # joined its group / holds its shards
                        return process
                await asyncio.sleep(0.2)
    except BaseException:
        await process.stop()
        raise
    await process.stop()
    raise RuntimeError(f"{name} did not become ready (see {log})")


@contextlib.asynccontextmanager
async def _running(
    stack: BenchStack, url: str, prefix: str, log: Path, name: str, *args: str
) -> AsyncIterator[_Process]:
    """A ``spectral`` process of a window (:func:`_spawn`), stopped when the block is left,
    however it is left: a window that failed (its database went away, a scrape failed) leaves
    no relay or consumer running behind it. The block may stop it itself, for its exit code."""
    process = await _spawn(stack, url, prefix, log, name, *args)
    try:
        yield process
    finally:
        await process.stop()


@dataclass
class _Produced:
    events: int = 0
    transactions: int = 0
    late_ticks: int = 0


async def _produce(
    url: str, records: Sequence[Record], per_tick: int, stop: asyncio.Event, out: _Produced
) -> None:
    """Write ``per_tick`` records every TICK seconds on a fixed schedule. A late tick catches
    up in one transaction: it writes every record the schedule owes by then (at most
    CATCH_UP ticks' worth), so a commit slower than a tick does not cut the offered load."""
    conn = await asyncpg.connect(url, server_settings={"role": "spectral_producer"})
    try:
        position = 0
        began = time.monotonic()
        while not stop.is_set() and position < len(records):
            now = time.monotonic()
            tick = int((now - began) / TICK)
            owed = (tick + 1) * per_tick - position
            if owed <= 0:
                await asyncio.sleep(began + (tick + 1) * TICK - now)
                continue
            if owed > per_tick:
                out.late_ticks += 1
            chunk = records[position : position + min(owed, CATCH_UP * per_tick)]
            position += len(chunk)
            async with conn.transaction():
                await _enqueue(conn, chunk)
            out.events += len(chunk)
            out.transactions += 1
    finally:
        await conn.close()


async def _observe_floor(
    bootstrap: str, topic: str, ages: list[tuple[float, float]], stop: asyncio.Event
) -> None:
    """Fetch ``topic`` from its end with no database work; note (when, age) for every record:
    its age since its outbox.ready_at when fetched."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"{topic}-floor",
        auto_offset_reset="latest",
        isolation_level="read_committed",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        while not stop.is_set():
            fetched = await consumer.getmany(timeout_ms=100)
            now, moment = time.time(), time.monotonic()
            for records in fetched.values():
                for record in records:
                    ready = ready_at(record.headers)
                    if ready is not None:
                        ages.append((moment, max(0.0, now - ready)))
    finally:
        await consumer.stop()


def _exact(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


@dataclass(frozen=True)
class _Window:
    consumer: Histogram
    relay: Histogram
    floor: list[float]
    events: int
    seconds: float
    relay_cpu: float
    consumer_cpu: float
    late_ticks: int = 0
    calibration: float = 0.0
    """:func:`calibration_us` just before the window."""
    machine_busy: float = 0.0
    """Busy share of the whole machine (all cores) over the window."""
    postgres_cpu: float | None = None
    """CPU seconds of this window's database backends and the server's own processes (None:
    not a local server)."""
    kafka_cpu: float | None = None
    bench_cpu: float = 0.0
    """CPU seconds of this benchmark's process: the writers and the floor observer."""


@dataclass(frozen=True)
class _Sample:
    consumer: Histogram
    relay: Histogram
    events: int
    at: float
    relay_cpu: float
    consumer_cpu: float
    late_ticks: int
    machine: MachineSample
    servers: ServerSample | None
    bench_cpu: float


async def _backends(url: str) -> set[int]:
    """The pids of this database's backends and of the server's own processes."""
    conn = await asyncpg.connect(url)
    try:
        return {row[0] for row in await conn.fetch(BACKENDS)}
    finally:
        await conn.close()


def calibration_us(rounds: int = 5) -> float:
    """CPU time of a fixed piece of pure-Python work (dict and str operations, the kind the
    relay and the consumer do), median of ``rounds``, in microseconds: lower is a faster
    machine. Taken just before each window, so runs of the same code can be told apart by the
    machine's speed at that moment (identical code drifted 15-25 % in CPU per event within 20
    minutes on the shared 2-core machine this was written on, and at 10,000 events/s the tail
    moves by much more than that)."""
    times = []
    for _ in range(rounds):
        started = time.process_time()
        table: dict[int, str] = {}
        total = 0
        for i in range(20_000):
            table[i & 1023] = str(i)
            total += len(table[i & 1023]) * 3 % 7
        times.append(time.process_time() - started)
    return statistics.median(times) * 1e6


async def _one_mode(
    stack: BenchStack, options: Options, report: Report, mode: str, *, seconds: float, rate: int
) -> _Window:
    calibration = calibration_us()
    url = await stack.database(f"fresh_{mode}")
    prefix = f"bench-{stack.run_id}-fresh-{mode}."
    await stack.create_topic(prefix + FAILURE_CLUSTER_DETECTED, options.partitions)
    logs = options.log_dir / stack.run_id
    logs.mkdir(parents=True, exist_ok=True)
    records = list(
        generate(DatasetSpec(events=int(rate * (WARM_UP + seconds + 2)), clusters=2_000, seed=11))
    )
    relay_args = ["outbox", "relay"] + ([] if mode != "poll" else ["--no-listen"])
    consumer_log = logs / f"fresh-{mode}-consumer.log"
    relay_log = logs / f"fresh-{mode}-relay.log"
    async with (
        _running(
            stack, url, prefix, consumer_log, "consumer", "consume", "rule-candidates"
        ) as consumer,
        _running(stack, url, prefix, relay_log, "relay", *relay_args) as relay,
    ):
        produced = _Produced()
        stop = asyncio.Event()
        floor: list[tuple[float, float]] = []
        observer = asyncio.create_task(
            _observe_floor(
                stack.endpoints.kafka_bootstrap, prefix + FAILURE_CLUSTER_DETECTED, floor, stop
            )
        )
        writers = -(-rate // WRITER_RATE)
        producer = asyncio.gather(
            *(
                _produce(
                    url,
                    [r for r in records if hash(r.key) % writers == writer],
                    max(1, round(rate / writers * TICK)),
                    stop,
                    produced,
                )
                for writer in range(writers)
            )
        )
        servers = await stack.servers()
        try:
            await asyncio.sleep(WARM_UP)
            if servers.postmaster is not None:
                servers.pids = await _backends(url)  # writers, relay, consumer: connected by now

            async def sample() -> _Sample:
                return _Sample(
                    consumer=await consumer.scrape(CONSUMER_HISTOGRAM),
                    relay=await relay.scrape(RELAY_HISTOGRAM),
                    events=produced.events,
                    at=time.monotonic(),
                    relay_cpu=relay.cpu(),
                    consumer_cpu=consumer.cpu(),
                    late_ticks=produced.late_ticks,
                    machine=machine_sample(),
                    servers=servers.sample() if servers.postmaster is not None else None,
                    bench_cpu=time.process_time(),
                )

            start = await sample()
            await asyncio.sleep(seconds)
            end = await sample()
        finally:
            stop.set()
            await asyncio.gather(producer, observer, return_exceptions=True)
        await _drained(url, report, mode)
        codes = [await relay.stop(), await consumer.stop()]
    if not options.keep:
        await stack.drop(url)
    report.check(
        f"freshness ({mode}): relay and consumer stopped cleanly", codes == [0, 0], f"{codes}"
    )
    postgres = kafka = None
    if start.servers is not None and end.servers is not None:
        postgres, kafka = server_cpu([start.servers, end.servers], start.servers.at, end.servers.at)
        kafka = kafka if servers.kafka is not None else None
    return _Window(
        consumer=end.consumer.minus(start.consumer),
        relay=end.relay.minus(start.relay),
        floor=[age for when, age in floor if start.at <= when <= end.at],
        events=end.events - start.events,
        seconds=end.at - start.at,
        relay_cpu=end.relay_cpu - start.relay_cpu,
        consumer_cpu=end.consumer_cpu - start.consumer_cpu,
        late_ticks=end.late_ticks - start.late_ticks,
        calibration=calibration,
        machine_busy=busy_fraction(start.machine, end.machine),
        postgres_cpu=postgres,
        kafka_cpu=kafka,
        bench_cpu=end.bench_cpu - start.bench_cpu,
    )


async def _drained(url: str, report: Report, mode: str) -> None:
    """Everything written was published and applied (or deduplicated) once."""
    conn = await asyncpg.connect(url)
    try:
        deadline = time.monotonic() + 60
        while True:
            row = await conn.fetchrow(
                "SELECT (SELECT count(*) FROM core.outbox WHERE published_at IS NULL) AS waiting,"
                " (SELECT count(DISTINCT idempotency_key) FROM core.outbox) AS keys,"
                " (SELECT count(*) FROM core.event_handled) AS handled"
            )
            assert row is not None
            if row["waiting"] == 0 and row["handled"] == row["keys"]:
                break
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
    finally:
        await conn.close()
    report.check(
        f"freshness ({mode}): every event written was published and applied once",
        row["waiting"] == 0 and row["handled"] == row["keys"],
        f"{row['waiting']} unpublished; {row['handled']:,} dedup rows for {row['keys']:,} keys",
    )


DRAIN_EVENTS = 50_000
"""Rows the relay's rate ceiling is measured on: committed at once, published from a backlog."""


async def _drain_ceiling(stack: BenchStack, options: Options, report: Report) -> None:
    """The relay's own ceiling: a running, idle relay (on LISTEN/NOTIFY) finds DRAIN_EVENTS rows
    committed in one transaction; the time from that commit until the last is marked published,
    and the relay's CPU over it. No consumer: the relay alone, with the database and the broker
    it needs. Steadier than latency under load."""
    url = await stack.database("fresh_drain")
    prefix = f"bench-{stack.run_id}-fresh-drain."
    await stack.create_topic(prefix + FAILURE_CLUSTER_DETECTED, options.partitions)
    logs = options.log_dir / stack.run_id
    logs.mkdir(parents=True, exist_ok=True)
    records = list(generate(DatasetSpec(events=DRAIN_EVENTS, clusters=2_000, seed=12)))
    async with _running(
        stack, url, prefix, logs / "fresh-drain-relay.log", "relay", "outbox", "relay"
    ) as relay:
        waiting, seconds, cpu = await _drained_backlog(url, records, relay)
        code = await relay.stop()
    if not options.keep:
        await stack.drop(url)
    report.check(
        "freshness (drain): the relay published the whole backlog and stopped cleanly",
        waiting == 0 and code == 0,
        f"{waiting:,} unpublished; exit {code}",
    )
    report.add(
        "relay_drain",
        len(records) / seconds,
        "events/s",
        f"{len(records):,} rows committed at once, published and marked in {seconds:.2f} s by "
        f"one relay (the relay's ceiling, no consumer); {cpu / len(records) * 1e6:.1f} us of "
        "relay CPU per event",
    )
    report.add(
        "relay_cpu_per_event_drain",
        cpu / len(records) * 1e6,
        "us",
        "the relay process draining a backlog (batches at their largest)",
    )


async def _drained_backlog(
    url: str, records: Sequence[Record], relay: _Process
) -> tuple[int, float, float]:
    """Commit ``records`` to the outbox at once and wait (at most 120 s) until ``relay`` has
    published them: (rows left unpublished, seconds, the relay's CPU seconds meanwhile)."""
    conn = await asyncpg.connect(url, server_settings={"role": "spectral_producer"})
    watch = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            for at in range(0, len(records), 5_000):
                await _enqueue(conn, records[at : at + 5_000])
        began, cpu = time.monotonic(), relay.cpu()
        waiting, deadline = len(records), began + 120
        while waiting and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            waiting = int(
                await watch.fetchval("SELECT count(*) FROM core.outbox WHERE published_at IS NULL")
            )
        return waiting, time.monotonic() - began, relay.cpu() - cpu
    finally:
        await conn.close()
        await watch.close()


async def run_freshness(stack: BenchStack, options: Options, report: Report) -> None:
    await _drain_ceiling(stack, options, report)
    windows: dict[str, _Window] = {}
    runs = [
        ("listen", options.freshness_seconds, options.freshness_rate),
        ("poll", options.freshness_seconds / 2, options.freshness_rate),
    ]
    if options.freshness_high_rate:
        # Half the 2,000/s window's length, twice its events: each window spans several of the
        # broker's young collections (one every ~10 s here), whose pauses make much of the tail.
        runs.append(("high", options.freshness_seconds / 2, options.freshness_high_rate))
    rates = {mode: rate for mode, _, rate in runs}
    for mode, seconds, rate in runs:
        windows[mode] = await _one_mode(stack, options, report, mode, seconds=seconds, rate=rate)
    for mode, window in windows.items():
        suffix = {"listen": "", "poll": "_polling"}.get(mode, f"_{rates[mode] // 1000}k")
        offered = window.events / window.seconds if window.seconds else 0.0
        how = (
            "relay polling every 200 ms (--no-listen)"
            if mode == "poll"
            else "relay sleeping on LISTEN/NOTIFY"
        )
        report.add(
            f"freshness{suffix}_offered",
            offered,
            "events/s",
            f"written into the outbox over the window, of {rates[mode]:,} asked "
            f"({window.late_ticks:,} writer ticks late)",
        )
        if window.consumer.count:
            p50, p99 = window.consumer.quantile(0.5), window.consumer.quantile(0.99)
            note = (
                f"outbox write -> projection commit at {offered:,.0f} events/s offered, "
                f"{window.consumer.count:,.0f} events over {window.seconds:.0f} s; {how}"
            )
            report.add(f"freshness{suffix}_p50", p50 * 1000, "ms", note)
            report.add(f"freshness{suffix}_p99", p99 * 1000, "ms", note)
            if mode != "poll":
                bound = 0.05 if rates[mode] <= _LOW_RATE else 0.1
                held = offered >= _HELD * rates[mode]
                report.target(
                    f"freshness p99 at {rates[mode]:,} events/s (ms)"
                    + ("" if held else f" — only {offered:,.0f} events/s offered"),
                    p99 * 1000,
                    f"< {bound * 1000:.0f}",
                    p99 < bound and held,
                )
        else:
            report.notes.append(
                f"freshness{suffix}: the consumer reported no {CONSUMER_HISTOGRAM} observations"
            )
        if window.floor:
            report.add(
                f"freshness{suffix}_floor_p99",
                _exact(window.floor, 0.99) * 1000,
                "ms",
                f"outbox write -> an idle aiokafka consumer's fetch, no database (p50 "
                f"{_exact(window.floor, 0.5) * 1000:.1f} ms, {len(window.floor):,} records): "
                "the relay, the broker and one fetch on this machine at this moment",
            )
        if window.relay.count:
            report.add(
                f"relay_delay{suffix}_p99",
                window.relay.quantile(0.99) * 1000,
                "ms",
                f"outbox write -> Kafka ack (p50 {window.relay.quantile(0.5) * 1000:.1f} ms); "
                f"{how}",
            )
        if window.events:
            report.add(
                f"relay_cpu_per_event{suffix}",
                window.relay_cpu / window.events * 1e6,
                "us",
                f"the relay process at {offered:,.0f} events/s; the consumer "
                f"{window.consumer_cpu / window.events * 1e6:.0f} us/event",
            )
            report.add(
                f"freshness{suffix}_calibration",
                window.calibration,
                "us",
                "CPU time of a fixed piece of pure-Python work just before the window (median of "
                "5; lower = a faster machine): compare runs of the same code by it",
            )
            report.add(
                f"freshness{suffix}_machine_busy",
                window.machine_busy * 100,
                "%",
                _cpu_note(window, offered),
            )


def _cpu_note(window: _Window, offered: float) -> str:
    """Where the machine's CPU went over a window, per event: latency at a high rate is mostly
    waiting for a core once the machine is nearly busy, so this says how near it was."""

    def per_event(seconds: float | None) -> str:
        return "n/a" if seconds is None else f"{seconds / window.events * 1e6:.0f}"

    return (
        f"the whole machine (all cores) over the window at {offered:,.0f} events/s; CPU per "
        f"event: relay {per_event(window.relay_cpu)}, consumer {per_event(window.consumer_cpu)}, "
        f"PostgreSQL {per_event(window.postgres_cpu)} (its writers' inserts, the relay's and "
        f"the consumer's statements), Kafka broker {per_event(window.kafka_cpu)}, this "
        f"benchmark's writers and floor observer {per_event(window.bench_cpu)} us"
    )
