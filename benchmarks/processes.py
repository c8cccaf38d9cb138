"""Run ``spectral consume NAME`` as real processes, sample their memory, read their batch logs.

Throughput is taken from the engine's own batch log lines (JSON, UTC timestamps to the
microsecond): from the start of the first batch (the first fetch returned) to the log line of
the last batch, written after its offsets were committed. Start-up, the group join and the
``--stop-when-idle`` wait at the end are outside that window.

Memory: ``VmRSS`` from ``/proc/PID/status`` every 100 ms; the growth is the median of the
samples in the last quarter of the batch window minus that of the first quarter.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

_SAMPLE_SECONDS = 0.1
_KIB = 1024


@dataclass(frozen=True)
class RssSample:
    at: float
    kib: int


@dataclass
class ProcessRun:
    """What one consumer process did, read from its log and /proc."""

    pid: int
    exit_code: int | None
    log: Path
    batches: int = 0
    records: int = 0
    first_fetch: float | None = None
    last_commit: float | None = None
    outcomes: dict[str, int] = field(default_factory=dict)
    rss: list[RssSample] = field(default_factory=list)

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

    @property
    def records(self) -> int:
        return sum(r.records for r in self.runs)

    @property
    def seconds(self) -> float:
        starts = [r.first_fetch for r in self.runs if r.first_fetch is not None]
        ends = [r.last_commit for r in self.runs if r.last_commit is not None]
        return max(ends) - min(starts) if starts and ends else 0.0

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
) -> GroupRun:
    """Start ``members`` processes of ``deployment`` in ``group``; wait until they stop idle.

    A process still running after ``limit_seconds`` gets SIGTERM (then SIGKILL 10 s later)
    and the run is reported as it stood.
    """
    _mkdir(log_dir)
    procs: list[tuple[asyncio.subprocess.Process, ProcessRun]] = []
    handles = []
    for index in range(members):
        log = log_dir / f"{group}-{index}.log"
        handle = log.open("wb")
        handles.append(handle)
        proc = await asyncio.create_subprocess_exec(
            spectral_executable(),
            "consume",
            deployment,
            "--group",
            group,
            "--stop-when-idle",
            str(idle_seconds),
            *extra_args,
            env=env,
            stdout=handle,
            stderr=asyncio.subprocess.STDOUT,
        )
        procs.append((proc, ProcessRun(pid=proc.pid, exit_code=None, log=log)))
    try:
        samplers = [asyncio.create_task(_sample(proc, run)) for proc, run in procs]
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
    for _, run in procs:
        _read_log(run)
    return GroupRun(group, tuple(run for _, run in procs))


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
    while proc.returncode is None:
        kib = _vm_rss_kib(status)
        if kib is None:
            return
        run.rss.append(RssSample(time.time(), kib))
        await asyncio.sleep(_SAMPLE_SECONDS)


def _vm_rss_kib(status: Path) -> int | None:
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
        for outcome in ("applied", "stale", "deduplicated", "dead_lettered"):
            run.outcomes[outcome] = run.outcomes.get(outcome, 0) + int(entry.get(outcome, 0))
        run.first_fetch = start if run.first_fetch is None else min(run.first_fetch, start)
        run.last_commit = end if run.last_commit is None else max(run.last_commit, end)
