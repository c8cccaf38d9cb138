"""Run ``spectral consume NAME`` as real processes, sample their memory, read their batch logs.

Throughput is taken from the engine's own batch log lines (JSON, UTC timestamps to the
microsecond): from the start of the first batch (the first fetch returned) to the log line of
the last batch, written after its offsets were committed. Start-up, the group join and the
``--stop-when-idle`` wait at the end are outside that window.

Memory: ``VmRSS`` from ``/proc/PID/status`` every 100 ms; the growth is the median of the
samples in the last quarter of the batch window minus that of the first quarter.

CPU: the process's user+system time (``/proc/PID/stat``) and the machine's busy time
(``/proc/stat``, all cores) sampled with it, so a run can say how much CPU one event cost the
consumer and how busy the whole machine (broker and database included) was meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import asyncpg

_SAMPLE_SECONDS = 0.1
_KIB = 1024
_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class RssSample:
    at: float
    kib: int
    cpu: float
    """User + system seconds of the process so far."""


@dataclass(frozen=True)
class MachineSample:
    at: float
    busy: float
    """Busy seconds of all cores together since boot (everything but idle and iowait)."""
    total: float


def machine_sample() -> MachineSample:
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    total = sum(fields[:8])
    return MachineSample(time.time(), (total - idle) / _TICKS, total / _TICKS)


def busy_fraction(before: MachineSample, after: MachineSample) -> float:
    """Busy fraction of the whole machine (all cores) between two samples."""
    total = after.total - before.total
    return (after.busy - before.busy) / total if total else 0.0


@dataclass(frozen=True)
class ServerSample:
    at: float
    postgres: dict[int, float]
    """CPU seconds so far of the postmaster and each of its children, by pid."""
    kafka: float
    postgres_kernel: dict[int, float] = field(default_factory=dict)
    """The part of ``postgres`` spent in the kernel (system time), by pid."""


@dataclass
class Servers:
    """The local stack's server processes (None: not local, not measured).

    PostgreSQL is shared (other databases may be busy): only the backends of the measured
    database (``pids``, refreshed from pg_stat_activity while a run goes: its clients and its
    autovacuum workers) and the server's own processes (WAL writer, checkpointer, ...) are
    counted.
    """

    postmaster: int | None
    kafka: int | None
    pids: set[int] = field(default_factory=set)

    def sample(self) -> ServerSample:
        postgres: dict[int, float] = {}
        kernel: dict[int, float] = {}
        if self.postmaster is not None:
            for pid in (self.postmaster, *_children(self.postmaster)):
                if pid != self.postmaster and pid not in self.pids:
                    continue
                split = _cpu_split(Path(f"/proc/{pid}/stat"))
                if split is not None:
                    postgres[pid] = split[0] + split[1]
                    kernel[pid] = split[1]
        kafka = _cpu_seconds(Path(f"/proc/{self.kafka}/stat")) if self.kafka else None
        return ServerSample(time.time(), postgres, kafka or 0.0, kernel)


def server_cpu(samples: list[ServerSample], start: float, end: float) -> tuple[float, float]:
    """(PostgreSQL, Kafka) CPU seconds between ``start`` and ``end``: backends born inside the
    window count from zero, backends that ended inside it up to their last sample."""
    inside = [s for s in samples if start <= s.at <= end]
    if len(inside) < 2:
        return 0.0, 0.0
    postgres = _backends_cpu([s.postgres for s in inside])
    return postgres, inside[-1].kafka - inside[0].kafka


def server_kernel_cpu(samples: list[ServerSample], start: float, end: float) -> float:
    """The kernel's part of :func:`server_cpu`'s PostgreSQL CPU seconds (system time: writing
    the write-ahead log and extending files into the page cache, waking, ...)."""
    inside = [s for s in samples if start <= s.at <= end]
    if len(inside) < 2:
        return 0.0
    return _backends_cpu([s.postgres_kernel for s in inside])


def _backends_cpu(samples: list[dict[int, float]]) -> float:
    """CPU seconds the backends of ``samples`` (each by pid, in time order) used from the first
    to the last: a backend born after the first counts from zero, one that ended before the
    last up to its last sample."""
    first = samples[0]
    last: dict[int, float] = {}
    for sample in samples:
        last.update(sample)
    return sum(cpu - first.get(pid, 0.0) for pid, cpu in last.items())


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(child) for child in text.split()]


def _within(samples: list[RssSample], start: float, end: float) -> list[RssSample]:
    return [s for s in samples if start <= s.at <= end]


@dataclass
class ProcessRun:
    """What one consumer process did, read from its log and /proc."""

    pid: int
    exit_code: int | None
    log: Path
    batches: int = 0
    records: int = 0
    decode_cpu: float = 0.0
    """CPU seconds the engine's decode took inside the process (its batch log's ``decode_cpu``,
    the thread's clock around each decode slice)."""
    first_fetch: float | None = None
    last_commit: float | None = None
    outcomes: dict[str, int] = field(default_factory=dict)
    rss: list[RssSample] = field(default_factory=list)

    def cpu_seconds(self) -> float:
        """CPU time the process spent inside its batch window (sampled every 100 ms)."""
        if self.first_fetch is None or self.last_commit is None:
            return 0.0
        inside = _within(self.rss, self.first_fetch, self.last_commit)
        return inside[-1].cpu - inside[0].cpu if len(inside) > 1 else 0.0

    @property
    def seconds(self) -> float:
        if self.first_fetch is None or self.last_commit is None:
            return 0.0
        return self.last_commit - self.first_fetch

    @property
    def peak_rss_mib(self) -> float:
        return max((s.kib for s in self.rss), default=0) / _KIB

    def rss_growth_mib(self) -> float:
        """Median RSS of the window's last quarter minus that of its first quarter."""
        if self.first_fetch is None or self.last_commit is None:
            return 0.0
        quarter = (self.last_commit - self.first_fetch) / 4
        first = [s.kib for s in self.rss if self.first_fetch <= s.at < self.first_fetch + quarter]
        last = [s.kib for s in self.rss if self.last_commit - quarter <= s.at <= self.last_commit]
        if not first or not last:
            return 0.0
        return (statistics.median(last) - statistics.median(first)) / _KIB


@dataclass(frozen=True)
class GroupRun:
    """Several members of one group, taken together."""

    group: str
    runs: tuple[ProcessRun, ...]
    machine: tuple[MachineSample, ...] = ()
    servers: tuple[ServerSample, ...] = ()

    @property
    def window(self) -> tuple[float, float]:
        starts = [r.first_fetch for r in self.runs if r.first_fetch is not None]
        ends = [r.last_commit for r in self.runs if r.last_commit is not None]
        return (min(starts), max(ends)) if starts and ends else (0.0, 0.0)

    def postgres_kernel_us_per_event(self) -> float:
        """The kernel's part of the PostgreSQL CPU per event, in microseconds."""
        if not self.records:
            return 0.0
        return server_kernel_cpu(list(self.servers), *self.window) / self.records * 1e6

    def server_us_per_event(self) -> tuple[float, float]:
        """(PostgreSQL, Kafka broker) CPU per event in microseconds (0 when not local)."""
        if not self.records:
            return 0.0, 0.0
        postgres, kafka = server_cpu(list(self.servers), *self.window)
        return postgres / self.records * 1e6, kafka / self.records * 1e6

    @property
    def cpu_us_per_event(self) -> float:
        """Consumer CPU (all members) per event, in microseconds."""
        return sum(r.cpu_seconds() for r in self.runs) / self.records * 1e6 if self.records else 0.0

    @property
    def machine_busy(self) -> float:
        """Busy fraction of the whole machine (all cores) during the batch window."""
        start, end = self.window
        inside = [m for m in self.machine if start <= m.at <= end]
        return busy_fraction(inside[0], inside[-1]) if len(inside) > 1 else 0.0

    @property
    def records(self) -> int:
        return sum(r.records for r in self.runs)

    @property
    def seconds(self) -> float:
        start, end = self.window
        return end - start

    @property
    def per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def outcome(self, name: str) -> int:
        return sum(r.outcomes.get(name, 0) for r in self.runs)


def spectral_executable() -> str:
    return str(Path(sys.executable).with_name("spectral"))


async def run_consumers(
    deployment: str,
    *,
    members: int,
    group: str,
    env: dict[str, str],
    log_dir: Path,
    limit_seconds: float,
    idle_seconds: float = 3.0,
    extra_args: tuple[str, ...] = (),
    servers: Servers | None = None,
    database_url: str | None = None,
) -> GroupRun:
    """Start ``members`` processes of ``deployment`` in ``group``; wait until they stop idle.

    A process still running after ``limit_seconds`` gets SIGTERM (then SIGKILL 10 s later)
    and the run is reported as it stood.
    """
    command = (
        spectral_executable(),
        "consume",
        deployment,
        "--group",
        group,
        "--stop-when-idle",
        str(idle_seconds),
        *extra_args,
    )
    run = await run_commands(
        [command] * members,
        name=group,
        env=env,
        log_dir=log_dir,
        limit_seconds=limit_seconds,
        servers=servers,
        database_url=database_url,
    )
    for member in run.runs:
        _read_log(member)
    return run


async def run_commands(
    commands: Sequence[Sequence[str]],
    *,
    name: str,
    env: dict[str, str],
    log_dir: Path,
    limit_seconds: float,
    servers: Servers | None = None,
    database_url: str | None = None,
) -> GroupRun:
    """Run ``commands`` at once (output to ``log_dir/NAME-i.log``), sampling each process's
    memory and CPU, the machine and the servers until every one has exited; the runs' windows
    and counts are left for the caller to read from the logs."""
    _mkdir(log_dir)
    procs: list[tuple[asyncio.subprocess.Process, ProcessRun]] = []
    handles = []
    for index, command in enumerate(commands):
        log = log_dir / f"{name}-{index}.log"
        handle = log.open("wb")
        handles.append(handle)
        proc = await asyncio.create_subprocess_exec(
            *command, env=env, stdout=handle, stderr=asyncio.subprocess.STDOUT
        )
        procs.append((proc, ProcessRun(pid=proc.pid, exit_code=None, log=log)))
    machine: list[MachineSample] = []
    server_samples: list[ServerSample] = []
    try:
        samplers = [asyncio.create_task(_sample(proc, run)) for proc, run in procs]
        samplers.append(asyncio.create_task(_sample_machine(machine, servers, server_samples)))
        if servers is not None and database_url is not None:
            samplers.append(asyncio.create_task(_track_backends(database_url, servers)))
        waits = [asyncio.create_task(_wait(proc, run, limit_seconds)) for proc, run in procs]
        await asyncio.gather(*waits)
        for sampler in samplers:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
    finally:
        for proc, _ in procs:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        for handle in handles:
            handle.close()
    return GroupRun(name, tuple(run for _, run in procs), tuple(machine), tuple(server_samples))


async def _wait(proc: asyncio.subprocess.Process, run: ProcessRun, limit_seconds: float) -> None:
    try:
        run.exit_code = await asyncio.wait_for(proc.wait(), limit_seconds)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            run.exit_code = await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            run.exit_code = await proc.wait()


async def _sample(proc: asyncio.subprocess.Process, run: ProcessRun) -> None:
    status = Path(f"/proc/{proc.pid}/status")
    stat = Path(f"/proc/{proc.pid}/stat")
    while proc.returncode is None:
        kib = vm_rss_kib(status)
        cpu = _cpu_seconds(stat)
        if kib is None or cpu is None:
            return
        run.rss.append(RssSample(time.time(), kib, cpu))
        await asyncio.sleep(_SAMPLE_SECONDS)


async def _sample_machine(
    samples: list[MachineSample], servers: Servers | None, server_samples: list[ServerSample]
) -> None:
    while True:
        samples.append(machine_sample())
        if servers is not None:
            server_samples.append(servers.sample())
        await asyncio.sleep(_SAMPLE_SECONDS)


BACKENDS = (
    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
    "OR (datname IS NULL AND backend_type NOT IN ('client backend', 'walsender'))"
)
"""This database's backends, its own autovacuum workers included, and the server's processes
that serve every database (WAL writer, checkpointer, background writer, autovacuum launcher).
Not an autovacuum worker in another database: it goes through what an earlier pass left (the
durable ceiling's 200,000 rows, seen at the start of the first pass) and is no cost of this one."""


async def _track_backends(database_url: str, servers: Servers) -> None:
    """Keep ``servers.pids`` at the backends of this database and the server's own processes."""
    conn = await asyncpg.connect(database_url)
    try:
        while True:
            servers.pids = {row[0] for row in await conn.fetch(BACKENDS)}
            await asyncio.sleep(0.5)
    finally:
        await conn.close()


def _cpu_seconds(stat: Path) -> float | None:
    split = _cpu_split(stat)
    return None if split is None else split[0] + split[1]


def _cpu_split(stat: Path) -> tuple[float, float] | None:
    """(user, system) CPU seconds of a process; None once it is gone."""
    try:
        text = stat.read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # after "pid (comm)"; utime, stime are 14 and 15
    return int(fields[11]) / _TICKS, int(fields[12]) / _TICKS


def vm_rss_kib(status: Path) -> int | None:
    """VmRSS of a process in KiB (a read of procfs never blocks); None once it is gone."""
    try:
        text = status.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return None


def _mkdir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def _read_log(run: ProcessRun) -> None:
    for line in run.log.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("event") != "batch":
            continue
        end = _epoch(entry["timestamp"])
        start = end - float(entry.get("seconds", 0.0))
        run.batches += 1
        run.records += int(entry.get("records", 0))
        run.decode_cpu += float(entry.get("decode_cpu", 0.0))
        for outcome in ("applied", "stale", "deduplicated", "dead_lettered"):
            run.outcomes[outcome] = run.outcomes.get(outcome, 0) + int(entry.get(outcome, 0))
        run.first_fetch = start if run.first_fetch is None else min(run.first_fetch, start)
        run.last_commit = end if run.last_commit is None else max(run.last_commit, end)
