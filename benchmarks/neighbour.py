"""A CPU-burning neighbour of fixed size, started by the benchmark itself.

``processes`` processes each spin (a tight arithmetic loop, no I/O, no memory traffic) for
``duty`` of every ``period`` seconds and sleep the rest, at the niceness of the benchmark's own
processes (so the consumer under test and its peers get no scheduling edge over it). Every run
of a stage that asks for it sees the same contention: the same number of spinners, the same duty
cycle, the same period, started before the measured runs and stopped after them.

Run alone: ``python -m benchmarks.neighbour --processes 2 --duty 0.5`` (until SIGTERM/SIGINT).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks.processes import _cpu_seconds

_ROOT = str(Path(__file__).resolve().parents[1])


@dataclass(frozen=True)
class NeighbourSpec:
    processes: int = 2
    duty: float = 0.5
    """Fraction of every period each process spins."""
    period: float = 0.01
    """Seconds of one spin + sleep cycle (10 ms: about a scheduler time slice, so the neighbour
    takes a core away often and briefly, as another busy workload does)."""

    @property
    def cores(self) -> float:
        """Cores' worth of CPU the neighbour asks for."""
        return self.processes * self.duty

    def describe(self) -> str:
        return (
            f"{self.processes} spinning process(es) at {self.duty:.0%} of every "
            f"{self.period * 1000:.0f} ms ({self.cores:.1f} cores' worth), same niceness as "
            "the processes measured"
        )


def spin(duty: float, period: float) -> None:
    """Burn ``duty`` of every ``period`` on the schedule (a late cycle is not made up); stop when
    the process that started this one is gone (a benchmark killed mid-stage leaves no spinner)."""
    busy = duty * period
    parent = os.getppid()
    next_start = time.monotonic()
    while os.getppid() == parent:
        until = next_start + busy
        x = 0
        while time.monotonic() < until:
            for _ in range(200):
                x += 1
        next_start += period
        rest = next_start - time.monotonic()
        if rest > 0:
            time.sleep(rest)
        else:
            next_start = time.monotonic()


@dataclass(frozen=True)
class NeighbourRun:
    spec: NeighbourSpec
    cpu_seconds: float
    seconds: float

    @property
    def cores_used(self) -> float:
        """Cores' worth the neighbour actually got while it ran."""
        return self.cpu_seconds / self.seconds if self.seconds else 0.0


@contextlib.asynccontextmanager
async def neighbour(spec: NeighbourSpec, result: list[NeighbourRun]) -> AsyncIterator[None]:
    """Run the neighbour around the block; appends what it used to ``result`` at the end."""
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "benchmarks.neighbour",
            "--duty",
            str(spec.duty),
            "--period",
            str(spec.period),
            cwd=_ROOT,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        for _ in range(spec.processes)
    ]
    started = time.monotonic()
    stats = [Path(f"/proc/{proc.pid}/stat") for proc in procs]
    cpu = 0.0
    try:
        await asyncio.sleep(0.5)  # spinning before the first measured run starts
        yield
    finally:
        cpu = sum(_cpu_seconds(stat) or 0.0 for stat in stats)
        seconds = time.monotonic() - started
        for proc in procs:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                await asyncio.wait_for(proc.wait(), 5)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        result.append(NeighbourRun(spec, cpu, seconds))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.neighbour", description=__doc__)
    parser.add_argument("--processes", type=int, default=1, help="spinners (run alone)")
    parser.add_argument("--duty", type=float, default=NeighbourSpec.duty)
    parser.add_argument("--period", type=float, default=NeighbourSpec.period)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not 0.0 < args.duty <= 1.0 or args.period <= 0:
        parser.error("--duty must be in (0, 1] and --period > 0")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    for _ in range(args.processes - 1):  # daemons: stopped when this process exits
        multiprocessing.Process(target=spin, args=(args.duty, args.period), daemon=True).start()
    with contextlib.suppress(KeyboardInterrupt):
        spin(args.duty, args.period)
    return 0


if __name__ == "__main__":
    sys.exit(main())
