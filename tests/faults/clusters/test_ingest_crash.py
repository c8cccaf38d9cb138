"""PostgreSQL crashes in the middle of concurrent ingests: clusters.summary_counts stays what it
counts.

clusters.summary_counts (migration 0065) keeps, per (cluster, summary), the number of failures
recorded and the most recent of them (observed_at descending, then failure_id), written by a
statement trigger on clusters.failures' inserts; a tick's evidence reads it instead of the
failures. It is right only if every ingest that committed added its new failures to it once and
no ingest that did not commit added anything: concurrent ingests of the same clusters and
summaries, failure_ids sent again (by the same writer and by another one, in one batch and
across batches), observation times that tie, and a server stopped with SIGQUIT (an immediate
shutdown: no checkpoint, the transactions in flight lost, crash recovery at the next start)
while ingests are in flight. After each phase it is compared with the same count made from the
failures themselves (and the retention's roll-up, clusters.pruned_summaries)."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from producers.clusters.model import FailureObservation
from producers.clusters.repository import ClusterRepository
from spectral.db.migrate import migrate
from spectral.devstack.postgres import LocalPostgres
from tests.integration.clusters.support import failure
from tests.integration.maintenance.support import session
from tests.support import eventually

pytestmark = [pytest.mark.integration, pytest.mark.faults]

WRITERS = 4
CLUSTERS = 3
SUMMARIES = ("timeout", "refused", "reset", "dns", "denied")
FAILURE_IDS = 2_500
"""The pool failure_ids are drawn from: writers send each other's failures, and their own,
again."""
BATCH = 30

COUNTED = """
SELECT DISTINCT ON (cluster_id, summary)
    cluster_id, summary, sum(n) OVER (PARTITION BY cluster_id, summary) AS failure_count,
    failure_id AS last_failure_id, observed_at AS last_observed_at
FROM (
    SELECT cluster_id, summary, 1::bigint AS n, failure_id, observed_at
    FROM clusters.failures
    UNION ALL
    SELECT cluster_id, summary, failure_count, last_failure_id, last_observed_at
    FROM clusters.pruned_summaries
) AS every_kind
ORDER BY cluster_id, summary, observed_at DESC, failure_id
"""
"""What clusters.summary_counts must hold, counted from the failures (the migration's fill)."""
KEPT = """
SELECT cluster_id, summary, failure_count, last_failure_id, last_observed_at
FROM clusters.summary_counts
ORDER BY cluster_id, summary
"""


@dataclass
class _Writer:
    """One ingesting replica: batches of failures drawn at random, one after another."""

    number: int
    committed: int = 0
    in_flight: bool = False
    failed: BaseException | None = None

    def batch(self, rng: random.Random) -> list[FailureObservation]:
        return [
            failure(
                f"f-{rng.randrange(FAILURE_IDS)}",
                rule_n=rng.randrange(CLUSTERS),
                summary=rng.choice(SUMMARIES),
                minutes=rng.randrange(40),  # few distinct times: ties on observed_at
            )
            for _ in range(BATCH)
        ]

    async def run(self, url: str, batches: int | None, seed: int) -> None:
        """Ingest ``batches`` batches (None: until the server goes away)."""
        rng = random.Random(seed)
        try:
            async with ClusterRepository.open(url, max_size=1) as repo:
                while batches is None or self.committed < batches:
                    observations = self.batch(rng)
                    observations += observations[: BATCH // 3]  # sent twice in one batch
                    self.in_flight = True
                    await repo.ingest(observations)
                    self.in_flight = False
                    self.committed += 1
        except Exception as exc:  # noqa: BLE001 - the crash ends the writer; recorded
            self.failed = exc


async def _assert_counts_hold(url: str) -> int:
    """summary_counts equals the count made from the failures; returns the failures recorded."""
    async with session(url) as conn:
        counted = [tuple(r) for r in await conn.fetch(COUNTED)]
        kept = [tuple(r) for r in await conn.fetch(KEPT)]
        recorded = int(await conn.fetchval("SELECT count(*) FROM clusters.failures"))
    assert kept == counted
    assert recorded > 0
    return recorded


def _sigquit(server: LocalPostgres) -> None:
    """An immediate shutdown: every backend exits at once, nothing is checkpointed."""
    pid = server.status().pid
    assert pid is not None
    os.kill(pid, signal.SIGQUIT)
    deadline = time.monotonic() + 30
    while server.status().running and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not server.status().running, "the server did not stop on SIGQUIT"


async def test_summary_counts_survive_concurrent_ingests_and_a_crash_between_them(
    tmp_path: Path,
) -> None:
    server = LocalPostgres(tmp_path / "pg")
    url = server.ensure_running()
    try:
        await migrate(url)

        # 1. Concurrent ingests of the same three clusters and five summaries, to the end.
        writers = [_Writer(n) for n in range(WRITERS)]
        await asyncio.gather(*(w.run(url, 12, seed=n) for n, w in enumerate(writers)))
        assert [w.failed for w in writers] == [None] * WRITERS
        first = await _assert_counts_hold(url)

        # 2. The same, stopped by a crash while the writers are mid-ingest.
        writers = [_Writer(n) for n in range(WRITERS)]
        running = [
            asyncio.create_task(w.run(url, None, seed=100 + n)) for n, w in enumerate(writers)
        ]
        await eventually(lambda: _ingested(writers, 3 * WRITERS), timeout=60)
        while not any(w.in_flight for w in writers):
            await asyncio.sleep(0)
        in_flight = sum(w.in_flight for w in writers)
        await asyncio.to_thread(_sigquit, server)
        await asyncio.wait_for(asyncio.gather(*running), timeout=60)
        assert all(w.failed is not None for w in writers), "a writer outlived the server"
        assert in_flight >= 1

        url = await asyncio.to_thread(server.start)
        second = await _assert_counts_hold(url)
        assert second > first

        # 3. Ingests after the crash recovery go on counting from what it kept.
        writers = [_Writer(n) for n in range(WRITERS)]
        await asyncio.gather(*(w.run(url, 6, seed=200 + n) for n, w in enumerate(writers)))
        assert [w.failed for w in writers] == [None] * WRITERS
        assert await _assert_counts_hold(url) > second
    finally:
        server.stop(wipe=True)


async def _ingested(writers: list[_Writer], batches: int) -> bool:
    return sum(w.committed for w in writers) >= batches
