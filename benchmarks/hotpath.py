"""``python -m benchmarks.hotpath``: the consumer's hot path in-process, step by step.

No broker and no consumer process: the benchmark's records are decoded and applied in this
process exactly as the engine does it (``RecordDecoder``, then ``BatchTransaction`` with the
rule-candidates handler, acting as its database role, into a fresh database of the local stack),
batch after batch. For each step it measures this process's CPU and the PostgreSQL backend's
(``/proc/PID/stat`` of the connection's server process) per event, so one lever can be judged on
its own, without Kafka's and the event loop's noise:

* ``decode``: ``RecordDecoder.decode_all`` over the records (best of three);
* ``transaction``: the first pass (every record new: claim, handler, stale marks, commit),
  with its wall time per event besides the two CPU figures (work done at once by the two
  processes counts once there);
* ``duplicates``: the same records again (every record a duplicate: only the claim).

``--rounds`` repeats the whole measure (each round into a new database) and prints medians;
``--compare DIR`` alternates rounds with another checkout's code and migrations, in the order
A B B A … (A/B: drift on a shared machine hits both alike, and neither side always runs
first). Prints one JSON line per figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class FakeRecord:
    """What the engine's decode step reads of a fetched Kafka record."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes], ...] = ()


def records(events: int, clusters: int, topic: str, partitions: int = 6) -> list[FakeRecord]:
    """The benchmark's stream as fetched records, in an order a member of all partitions could
    see: each partition's records in offset order, partitions chosen by the record key."""
    from benchmarks.dataset import DatasetSpec, generate  # noqa: PLC0415 - lazy: --child

    offsets = [0] * partitions
    out: list[FakeRecord] = []
    stamp = int(time.time() * 1000) - 3_600_000
    for index, record in enumerate(generate(DatasetSpec(events=events, clusters=clusters))):
        partition = hash_partition(record.key, partitions)
        out.append(
            FakeRecord(
                topic, partition, offsets[partition], record.key, record.value, stamp + index // 50
            )
        )
        offsets[partition] += 1
    return out


def hash_partition(key: bytes, partitions: int) -> int:
    return int.from_bytes(key[-4:], "big") % partitions


def batches(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _cpu_split(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of a process (benchmarks.processes has its twin; this child
    may run on another checkout's packages, which need not have it)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / _TICKS, int(fields[12]) / _TICKS


async def _engine_pool(database_url: str, role: str | None) -> tuple[Any, Any]:
    """A pool of one connection, lent as the engine lends its own: a batch's COMMIT carries the
    session's reset (a checkout from before that: the pool's own reset, one round trip more)."""
    from spectral.db.connect import create_pool  # noqa: PLC0415
    from spectral.engine import transaction  # noqa: PLC0415

    open_pool = getattr(transaction.PoolConnections, "open", None)
    if open_pool is not None:
        connections = await open_pool(database_url, role=role, max_size=1, session={})
        return connections.pool, connections
    reset = getattr(transaction, "reset_session", None)  # a checkout from before open()
    if reset is None:
        pool = await create_pool(database_url, role=role, min_size=1, max_size=1, session={})
        return pool, transaction.PoolConnections(pool)
    pool = await create_pool(
        database_url, role=role, min_size=1, max_size=1, session={}, reset=reset
    )
    return pool, transaction.PoolConnections(pool, reset_in_commit=True)  # type: ignore[call-arg,unused-ignore]


async def _round(database_url: str, events: int, clusters: int, batch: int) -> dict[str, float]:
    """One round of every step in this process (the code on ``sys.path``)."""
    from prometheus_client import CollectorRegistry  # noqa: PLC0415

    from consumers.rule_candidates.deployment import build  # noqa: PLC0415
    from contracts import FAILURE_CLUSTER_DETECTED  # noqa: PLC0415
    from spectral.engine.decode import RecordDecoder  # noqa: PLC0415
    from spectral.engine.metrics import ConsumerMetrics  # noqa: PLC0415
    from spectral.engine.retrying import Retrying  # noqa: PLC0415
    from spectral.engine.transaction import BatchTransaction  # noqa: PLC0415
    from spectral.plugins import installed_registry  # noqa: PLC0415
    from spectral.retry import Backoff  # noqa: PLC0415
    from spectral.settings import load_settings  # noqa: PLC0415

    topic = FAILURE_CLUSTER_DETECTED
    fetched = records(events, clusters, topic)
    registry = CollectorRegistry()
    handler = build(load_settings(), database_url, registry)
    views = getattr(handler, "reads_views", False)  # a checkout from before views: none
    decoder = (
        RecordDecoder(handler.name, {topic: topic}, installed_registry(), views=True)
        if views
        else RecordDecoder(handler.name, {topic: topic}, installed_registry())
    )
    figures: dict[str, float] = {}

    decoded: list[Any] = []
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        decoded = [decoder.decode_all(chunk)[0] for chunk in batches(fetched, batch)]
        best = min(best, time.process_time() - started)
    figures["decode_us"] = best / len(fetched) * 1e6

    pool, lender = await _engine_pool(database_url, handler.database_role)
    try:
        async with pool.acquire() as conn:
            backend = await conn.fetchval("SELECT pg_backend_pid()")
        metrics = ConsumerMetrics(registry, handler.name)
        transaction = BatchTransaction(
            handler,
            lender,
            Retrying(Backoff(base=0.1, cap=1.0), metrics, asyncio.Event()),
        )
        for step in ("transaction", "duplicates"):
            figures.update(await _step(step, transaction, decoded, backend, database_url))
    finally:
        await pool.close()
    return figures


async def _step(
    step: str, transaction: Any, decoded: list[Any], backend: int, database_url: str
) -> dict[str, float]:
    """Every batch through ``transaction``, one after another: this process's CPU, the
    backend's, the wall time and the WAL written, per event."""
    client = user = kernel = wall = 0.0
    count = 0
    wal_before = await _wal_position(database_url)
    for deliveries in decoded:
        client_before, (user_before, kernel_before) = (time.process_time(), _cpu_split(backend))
        wall_before = time.perf_counter()
        await transaction.apply(deliveries)
        wall += time.perf_counter() - wall_before
        client += time.process_time() - client_before
        user_after, kernel_after = _cpu_split(backend)
        user += user_after - user_before
        kernel += kernel_after - kernel_before
        count += len(deliveries)
    wal = await _wal_position(database_url) - wal_before
    return {
        f"{step}_client_us": client / count * 1e6,
        # The batches one after another, as the engine's transactions run: the work this
        # process and the backend do in turn adds up here, the work they do at once (the
        # handler's while the claim runs: Handler.ahead) overlaps.
        f"{step}_wall_us": wall / count * 1e6,
        f"{step}_postgres_us": (user + kernel) / count * 1e6,
        # The backend's share spent in the kernel (writing WAL, extending files), and the WAL
        # written per event (the whole server's: nothing else writes during a step).
        f"{step}_postgres_kernel_us": kernel / count * 1e6,
        f"{step}_wal_bytes": wal / count,
    }


async def _wal_position(database_url: str) -> int:
    import asyncpg  # noqa: PLC0415

    conn = await asyncpg.connect(database_url)
    try:
        return int(await conn.fetchval("SELECT pg_current_wal_insert_lsn() - '0/0'"))
    finally:
        await conn.close()


def _child(args: argparse.Namespace) -> int:
    """Run one round in this process and print its figures (the parent's --child)."""
    from spectral.engine.collector import tune_for_batches  # noqa: PLC0415

    tune_for_batches()
    figures = asyncio.run(_round(args.child, args.events, args.clusters, args.batch))
    print(json.dumps(figures), flush=True)
    return 0


async def _databases(label: str, checkout: Path | None) -> tuple[Any, str]:
    from benchmarks.stack import BenchStack  # noqa: PLC0415

    stack = BenchStack.resolve()
    url = await stack.database(label, None if checkout is None else checkout / "schemas" / "sql")
    return stack, url


def _run_round(args: argparse.Namespace, checkout: Path | None, index: int) -> dict[str, float]:
    stack, url = asyncio.run(_databases(f"hotpath{index}", checkout))
    try:
        root = checkout or Path(__file__).resolve().parent.parent
        env = {**os.environ, "PYTHONPATH": str(root)}
        command = [sys.executable, str(Path(__file__).resolve()), "--child", url]
        command += ["--events", str(args.events), "--clusters", str(args.clusters)]
        command += ["--batch", str(args.batch)]
        done = subprocess.run(
            command,
            env=env,
            capture_output=True,
            text=True,
            check=True,
            cwd=root,
        )
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))
    finally:
        asyncio.run(stack.close())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hotpath", description=__doc__)
    parser.add_argument("--events", type=int, default=40_000)
    parser.add_argument("--clusters", type=int, default=4_000)
    parser.add_argument("--batch", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compare", type=Path, default=None, help="another checkout (A/B)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args)
    sides: list[tuple[str, Path | None]] = [("this", None)]
    if args.compare is not None:
        sides.append(("other", args.compare.resolve()))
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in sides}
    for index in range(args.rounds):
        # A B B A ...: neither side always runs first (right after the other's heavy work).
        for name, checkout in sides if index % 2 == 0 else sides[::-1]:
            figures = _run_round(args, checkout, index)
            load = Path("/proc/loadavg").read_text().split()[0]
            print(json.dumps({"side": name, "round": index, "load": float(load), **figures}))
            results[name].append(figures)
    for name, runs in results.items():
        medians = {key: round(statistics.median(r[key] for r in runs), 2) for key in runs[0]}
        print(json.dumps({"side": name, "median_of": len(runs), **medians}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
