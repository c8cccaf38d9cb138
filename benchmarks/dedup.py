"""The dedup record's cost, measured in the database (stage ``dedup``): the claim statement per
key, and the price of forgetting, for the design in place and for the alternatives.

Claims (2,000 keys per statement, as the engine sends them, rounds interleaved so drift on a
shared machine hits every variant alike; medians):

* ``plain``  — one unpartitioned table, ``INSERT … ON CONFLICT DO NOTHING`` (the design before
  the ring; also what batched deletes would keep);
* ``plain+time index`` — the same with the index on ``handled_at`` that batched deletes need;
* ``ring``   — the two-slot ring with row-level security, as the consumer roles run it;
* ``ring, no RLS`` — the ring as the table owner (row-level security does not apply).

Each variant claims fresh keys into a table that already holds ``dedup_prefill`` rows per slot
(the previous generation full, as in steady state), then the same keys again (all duplicates).

Forgetting ``dedup_prefill`` rows: the ring's rotation (TRUNCATE of a slot under the barrier)
against ``DELETE … WHERE handled_at < cutoff`` in batches of 10,000 on the indexed plain table —
time and WAL written.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path

import asyncpg

import spectral.engine
from benchmarks.options import Options
from benchmarks.report import Report
from benchmarks.stack import BenchStack
from spectral.db.queries import load_queries
from spectral.engine.keys import dedup_keys
from spectral.maintenance.policy import DedupRotation
from spectral.maintenance.repository import MaintenanceRepository

ENGINE_SQL = load_queries(Path(spectral.engine.__file__).with_name("queries.sql"))
"""The consumer engine's own statements (claim_keys: the dedup claim)."""
CONSUMER = "rule-candidates"
BATCH = 2000
ROUNDS = 15
DELETE_BATCH = 10_000

_PLAIN = """
CREATE TABLE bench_plain (
    consumer text NOT NULL, idempotency_key text NOT NULL, event_id uuid NOT NULL,
    outcome text NOT NULL, source_partition integer NOT NULL, source_offset bigint NOT NULL,
    handled_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (consumer, idempotency_key));
CREATE TABLE bench_plain_timed (LIKE bench_plain INCLUDING ALL);
CREATE INDEX bench_plain_timed_at ON bench_plain_timed (handled_at);
GRANT SELECT, INSERT ON bench_plain, bench_plain_timed TO spectral_projector;
"""
_PLAIN_CLAIM = """
INSERT INTO {table} (consumer, idempotency_key, event_id, outcome, source_partition, source_offset)
SELECT $1, k, e, 'applied', p, o
FROM unnest($2::text[], $3::uuid[], $4::int[], $5::bigint[]) AS t(k, e, p, o)
ON CONFLICT (consumer, idempotency_key) DO NOTHING
RETURNING idempotency_key
"""
_PREFILL = """
INSERT INTO {table} (consumer, {key_column}, event_id, outcome, source_partition,
                     source_offset, handled_at{slot_column})
SELECT 'rule-candidates', {key_value}, gen_random_uuid(), 'applied', 0, g,
       now() - interval '30 days'{slot_value}
FROM generate_series(1, $1) AS g
"""

Claim = Callable[[asyncpg.Connection, list[str]], Awaitable[int]]


def _args(keys: list[str] | list[bytes]) -> list[object]:
    return [CONSUMER, keys, [uuid.uuid4() for _ in keys], [0] * len(keys), list(range(len(keys)))]


def _claim(sql: str) -> Claim:
    """A plain claim: the statement returns a row per new key."""

    async def claim(conn: asyncpg.Connection, keys: list[str]) -> int:
        async with conn.transaction():
            return len(await conn.fetch(sql, *_args(keys)))

    return claim


async def _ring_claim(conn: asyncpg.Connection, keys: list[str]) -> int:
    """The engine's claim (keys in their stored form, keys.py): it answers with the keys held."""
    async with conn.transaction():
        held = await conn.fetchval(ENGINE_SQL["claim_keys"], *_args(dedup_keys(keys)))
    return len(keys) - len(held)


async def _wal(conn: asyncpg.Connection) -> int:
    return int(await conn.fetchval("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"))


async def run_dedup(stack: BenchStack, options: Options, report: Report) -> None:
    url = await stack.database("dedup")
    admin = await asyncpg.connect(url)
    try:
        await admin.execute(_PLAIN)
        rows = options.dedup_prefill
        for table in ("bench_plain", "bench_plain_timed"):
            await admin.execute(
                _PREFILL.format(
                    table=table,
                    key_column="idempotency_key",
                    key_value="'old-' || g",
                    slot_column="",
                    slot_value="",
                ),
                rows,
            )
        # The ring as in steady state: generation 1 (slot 0) full and previous, 2 current.
        await admin.execute(
            _PREFILL.format(
                table="core.event_handled",
                key_column="dedup_key",
                key_value="core.dedup_key('old-' || g)",
                slot_column=", slot",
                slot_value=", 0",
            ),
            rows,
        )
        await admin.execute(
            "UPDATE core.dedup_generations SET ended_at = now() WHERE generation = 1;"
            "INSERT INTO core.dedup_generations (generation, slot, started_at) "
            "VALUES (2, 1, now())"
        )
        await admin.execute("ANALYZE")
        await _claims(url, report)
        await _forgetting(url, admin, report)
    finally:
        await admin.close()


def _backend_cpu_ns(pid: int) -> int | None:
    """CPU time (ns) a PostgreSQL backend on this machine has used; None when it is remote."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


async def _claims(url: str, report: Report) -> None:
    role = await asyncpg.connect(url, server_settings={"role": "spectral_projector"})
    owner = await asyncpg.connect(url)
    variants: dict[str, tuple[asyncpg.Connection, Claim]] = {
        "plain": (role, _claim(_PLAIN_CLAIM.format(table="bench_plain"))),
        "plain+time index": (role, _claim(_PLAIN_CLAIM.format(table="bench_plain_timed"))),
        "ring": (role, _ring_claim),
        "ring, no RLS": (owner, _ring_claim),
    }
    pids = {
        name: int(await conn.fetchval("SELECT pg_backend_pid()"))
        for name, (conn, _) in variants.items()
    }
    wall: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, dict[str, int]] = {name: {"fresh": 0, "dupes": 0} for name in variants}
    wrong: dict[str, int] = dict.fromkeys(variants, 0)
    local = all(_backend_cpu_ns(pid) is not None for pid in pids.values())
    try:
        for round_ in range(ROUNDS):
            for index, (name, (conn, claim)) in enumerate(variants.items()):
                keys = [f"r{round_}-v{index}-{i}" for i in range(BATCH)]
                before = _backend_cpu_ns(pids[name]) or 0
                started = time.perf_counter()
                new = await claim(conn, keys)
                wall[name].append((time.perf_counter() - started) / BATCH * 1e6)
                middle = _backend_cpu_ns(pids[name]) or 0
                again = await claim(conn, keys)
                after = _backend_cpu_ns(pids[name]) or 0
                cpu[name]["fresh"] += middle - before
                cpu[name]["dupes"] += after - middle
                wrong[name] += new != BATCH or again != 0
    finally:
        await role.close()
        await owner.close()
    keys_total = ROUNDS * BATCH
    for name in variants:
        report.check(
            f"dedup {name}: every fresh key new, every repeated key a duplicate",
            wrong[name] == 0,
            f"{wrong[name]} of {ROUNDS} rounds wrong",
        )
        slug = name.replace(", ", "_").replace(" ", "_").replace("+", "_")
        if local:
            report.add(
                f"dedup_claim_{slug}",
                cpu[name]["fresh"] / keys_total / 1000,
                "us/key",
                f"PostgreSQL backend CPU per fresh key ({ROUNDS} statements of {BATCH:,}); "
                f"duplicates {cpu[name]['dupes'] / keys_total / 1000:.1f} us/key; wall median "
                f"{statistics.median(wall[name]):.1f} us/key",
            )
        else:
            report.add(
                f"dedup_claim_{slug}",
                statistics.median(wall[name]),
                "us/key",
                f"wall time per fresh key, median of {ROUNDS} statements of {BATCH:,} "
                "(the database is remote: no CPU figure)",
            )


async def _forgetting(url: str, admin: asyncpg.Connection, report: Report) -> None:
    repo = await MaintenanceRepository.open(url)
    try:
        generations = await repo.dedup_generations()
        current = next(g for g in generations if g.ended_at is None)
        previous = next(g for g in generations if g.ended_at is not None)
        wal = await _wal(admin)
        started = time.perf_counter()
        forgotten = await repo.rotate_dedup(
            DedupRotation(current, previous, current.generation + 1, previous.slot, timedelta(0)),
            timedelta(seconds=10),
        )
        seconds = time.perf_counter() - started
        wal_bytes = await _wal(admin) - wal
    finally:
        await repo.close()
    report.add(
        "dedup_forget_truncate",
        seconds * 1000,
        "ms",
        f"rotation forgetting a slot of ~{forgotten:,} rows (TRUNCATE under the barrier); "
        f"{wal_bytes / 1024:,.0f} KiB of WAL",
    )
    wal = await _wal(admin)
    started = time.perf_counter()
    deleted = 0
    while True:
        status = await admin.execute(
            "DELETE FROM bench_plain_timed WHERE ctid = ANY (ARRAY(SELECT ctid "
            "FROM bench_plain_timed WHERE handled_at < now() - interval '1 day' LIMIT $1))",
            DELETE_BATCH,
        )
        count = int(status.split()[-1])
        deleted += count
        if count == 0:
            break
    seconds = time.perf_counter() - started
    wal_bytes = await _wal(admin) - wal
    vacuum_started = time.perf_counter()
    await admin.execute("VACUUM bench_plain_timed")
    vacuum = time.perf_counter() - vacuum_started
    wal_bytes_vacuum = await _wal(admin) - wal - wal_bytes
    report.add(
        "dedup_forget_batched_delete_vacuum",
        vacuum * 1000,
        "ms",
        f"the VACUUM that reclaims those rows (heap and both indexes); "
        f"{wal_bytes_vacuum / 1024:,.0f} KiB of WAL",
    )
    report.add(
        "dedup_forget_batched_delete",
        seconds * 1000,
        "ms",
        f"DELETE of {deleted:,} rows by handled_at in batches of {DELETE_BATCH:,} (index on "
        f"handled_at; the table's vacuum comes on top); {wal_bytes / 1024:,.0f} KiB of WAL; "
        f"{seconds / max(deleted, 1) * 1e6:.1f} us/row",
    )
