"""Delayed outbox rows under real faults: relays SIGKILLed at random moments, the database server
crashed (every process SIGKILLed, then crash recovery) while delayed rows wait and a relay has
rows in flight, and maintenance passes all along that rotate the outbox's slots and move the
delayed rows left in an ended generation to the current one (a margin of 0.2 s instead of a
minute, so that the rows of a test are moved). Every row is published, a key's rows in order,
none before its time: a delayed row, and every later row of its key, leave after its
``available_at`` (their Kafka timestamps, the relay's send time on the same clock, say so).

A private PostgreSQL server (crashing it disturbs no other test) and the session's broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import subprocess
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import asyncpg
import pytest

from spectral.db.migrate import migrate
from spectral.devstack.postgres import LocalPostgres
from spectral.errors import TransientError
from spectral.settings import Settings, load_settings
from tests.faults.outbox.relay.test_relay_faults import (
    check_complete_and_ordered,
    start_relay,
    wait_exit,
)
from tests.faults.outbox.relay.test_server_crash import _crash
from tests.integration.maintenance.support import run_maintenance
from tests.integration.outbox.relay.support import (
    EVENT_TYPE,
    Received,
    enqueue_numbered,
    key_id,
    outbox_counts,
    read_topic,
)
from tests.support import eventually

pytestmark = [pytest.mark.integration, pytest.mark.faults]

KEYS = 10
SEQS_PER_ROUND = 20
KILLS = 3
EVERY = 7
"""Every EVERY-th snapshot of every key is written delayed (0.3-4 s past its write)."""


class Writer:
    """Numbered snapshots of every key, one transaction per number; remembers the delayed ones."""

    def __init__(self, url: str, rng: random.Random) -> None:
        self.url = url
        self.rng = rng
        self.last = 0
        self.delayed: dict[str, list[tuple[int, datetime]]] = defaultdict(list)

    async def round(self) -> None:
        for seq in range(self.last + 1, self.last + SEQS_PER_ROUND + 1):
            keys = [key_id(k) for k in range(KEYS)]
            available_at = None
            if seq % EVERY == 0:
                available_at = datetime.now(UTC) + timedelta(seconds=self.rng.uniform(0.3, 4.0))
                for key in keys:
                    self.delayed[str(key)].append((seq, available_at))
            await enqueue_numbered(self.url, [(key, seq) for key in keys], available_at)
        self.last += SEQS_PER_ROUND


async def _maintained(settings: Settings, stop: asyncio.Event, moved: list[int]) -> None:
    """Maintenance passes until ``stop``: published rows kept 0.5 s, so a generation ends every
    few passes; delayed rows beyond 0.2 s moved out of ended ones (``moved``: per pass)."""
    while not stop.is_set():
        # the server crashed mid-pass: the pass fails, the next one runs once it is back
        with contextlib.suppress(
            OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TransientError
        ):
            report = await run_maintenance(
                settings,
                outbox_retention=timedelta(seconds=0.5),
                delay_margin=timedelta(seconds=0.2),
            )
            moved.append(report.outbox.moved_delayed_rows)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.3)


def _early(records: list[Received], delayed: dict[str, list[tuple[int, datetime]]]) -> list[str]:
    """Records sent before a delayed row of their key at or before them became available."""
    early = []
    for record in records:
        for seq, available_at in delayed.get(record.key, ()):
            if seq <= record.seq and record.timestamp_ms < int(available_at.timestamp() * 1000):
                early.append(f"{record.key} #{record.seq} sent before #{seq}'s {available_at}")
    return early


async def test_delayed_rows_through_relay_kills_a_server_crash_and_rotations(
    spectral_env: dict[str, str], kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    server = LocalPostgres(tmp_path / "pg")
    url = server.ensure_running()
    env = {**spectral_env, "SPECTRAL_DATABASE_URL": url}
    settings = load_settings(
        kafka_bootstrap=kafka_bootstrap, database_url=url, topic_prefix=topic_prefix
    )
    log = tmp_path / "relay.log"
    rng = random.Random(57)
    writer = Writer(url, rng)
    relay: subprocess.Popen[bytes] | None = None
    stop, moved = asyncio.Event(), list[int]()
    maintenance: asyncio.Task[None] | None = None
    try:
        await migrate(url)
        maintenance = asyncio.create_task(_maintained(settings, stop, moved))
        # 1. Relays killed at random moments, each after it published some of its round.
        for _ in range(KILLS):
            await writer.round()
            relay = await _publishing(env, log, url)
            await asyncio.sleep(rng.uniform(0.0, 0.3))
            relay.send_signal(signal.SIGKILL)
            assert await wait_exit(relay) == -signal.SIGKILL
        # 2. The server crashed under a running relay, delayed rows waiting.
        await writer.round()
        relay = await _publishing(env, log, url)
        unpublished = await _unpublished(url)
        _crash(server)
        server.start()
        # 3. The relay, never restarted, publishes the rest once the server is back (published
        #    rows leave with their slots: the topic tells that every row went out).
        total = KEYS * writer.last
        try:
            await eventually(partial(_fewer, url, 1), timeout=90, interval=0.2)
        except AssertionError as exc:
            raise AssertionError(await _state(url, tmp_path)) from exc
        assert relay.poll() is None, "the relay must wait for the server, not exit"
        relay.send_signal(signal.SIGTERM)
        assert await wait_exit(relay) == 0
        stop.set()
        await maintenance
        rotations = await _outbox_generations(url)
    finally:
        stop.set()
        if maintenance is not None:
            await asyncio.wait([maintenance], timeout=30)
        if relay is not None and relay.poll() is None:
            relay.kill()
            relay.wait()
        server.stop(wipe=True)
    records = await read_topic(kafka_bootstrap, topic_prefix + EVENT_TYPE, timeout=60)
    counts = check_complete_and_ordered(records, keys=KEYS, last=writer.last)
    assert len(counts) == total
    assert _early(records, writer.delayed) == []
    print(  # noqa: T201 - reported by the test run
        f"{total} rows ({KEYS * len(writer.delayed[str(key_id(0))])} delayed), "
        f"{len(records)} records sent ({len(records) - total} again), "
        f"{unpublished} unpublished at the crash, outbox generations {rotations}, "
        f"{len(moved)} maintenance passes moved {sum(moved)} delayed rows"
    )
    assert sum(moved) > 0, "no delayed row was moved: the test did not test that"


async def _publishing(env: dict[str, str], log: Path, url: str) -> subprocess.Popen[bytes]:
    """A relay started, once it has published some of the rows waiting."""
    waiting = await _unpublished(url)
    relay = start_relay(env, log, "--batch", "25")
    try:
        await eventually(partial(_fewer, url, waiting), timeout=30, interval=0.02)
    except BaseException:
        relay.kill()
        relay.wait()
        raise
    return relay


async def _unpublished(url: str) -> int:
    return (await outbox_counts(url))[1]


async def _fewer(url: str, than: int) -> bool:
    """Fewer than ``than`` rows unpublished (published rows leave with their slots: the rows
    still waiting are what tells progress)."""
    return await _unpublished(url) < than


async def _outbox_generations(url: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval("SELECT max(generation) FROM core.outbox_generations"))
    finally:
        await conn.close()


async def _state(url: str, tmp_path: Path) -> str:
    """What a failed wait leaves to read: the unpublished rows, the generations, the logs."""
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT id, slot, record_key, created_at, available_at, now() AS now"
            " FROM core.outbox WHERE published_at IS NULL ORDER BY id LIMIT 30"
        )
        generations = await conn.fetch("SELECT * FROM core.outbox_generations ORDER BY 1")
    finally:
        await conn.close()
    logs = {
        name: (tmp_path / name).read_text(errors="replace")[-6000:]
        for name in ("relay.log", "maintenance.log")
    }
    return "\n".join(
        [*map(str, rows), *map(str, generations), *(f"--- {n}\n{t}" for n, t in logs.items())]
    )
