"""The failures' retention: ``clusters.failures`` (one row per ingested failure) pruned behind
``SPECTRAL_CLUSTER_FAILURE_RETENTION_SECONDS`` by `spectral maintenance`, without changing any
snapshot.

A failure goes once it was recorded longer ago than the retention, if it was observed outside
the severity policy's rate window before its cluster's latest failure and is not among its
cluster's most recent ``evidence_limit`` failures. What the snapshot still needs of it is rolled
up in the same transaction (migration ``retention``): the cluster's pruned count and earliest
observation, and per summary the count and the most recent pruned failure — so a cluster's
failure_count, first_observed_at, severity and evidence, and so its snapshot hash, are the same
after a prune as before. The price: ingest is idempotent by failure_id within the retention; a
line sent again after its failure was pruned counts as a new failure.

Clusters are visited in cluster_id order from a cursor, a batch at a time, each batch its own
transaction holding the clusters' rows (``SKIP LOCKED``: a cluster an ingest or a tick is busy
with waits for the next pass). A full sweep runs at most every ``every`` (an hour by default;
failures are kept for weeks): a pass between sweeps goes on from the cursor only while the last
sweep stopped at its bound.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Final
from uuid import UUID

import asyncpg

from producers.clusters.policy import ClusterPolicy
from producers.clusters.settings import ClusterSettings
from spectral.db.connect import guarded
from spectral.db.queries import load_queries
from spectral.maintenance.retention import MOST_PER_PASS, Measured, Pruned, RetentionTask
from spectral.settings import Settings

_SQL: Final = load_queries(Path(__file__).with_name("retention.sql"))

CLUSTERS_PER_BATCH: Final = 200


@dataclass
class FailureRetention:
    """The retention task of ``clusters.failures`` (spectral/maintenance/retention.py)."""

    policy: ClusterPolicy
    every: timedelta = timedelta(hours=1)
    clock: Callable[[], float] = time.monotonic
    table: str = "clusters.failures"
    _cursor: UUID | None = field(default=None, init=False)
    _swept_at: float | None = field(default=None, init=False)

    async def prune(self, conn: asyncpg.Connection, now: datetime, *, dry_run: bool) -> Pruned:
        retention = self.policy.failure_retention
        if retention is None:
            return Pruned(self.table, held="kept for ever (no failure retention)")
        seconds = retention.total_seconds()
        resuming = self._cursor is not None
        due = self._swept_at is None or self.clock() - self._swept_at >= self.every.total_seconds()
        if not (resuming or due):
            return Pruned(self.table, horizon_seconds=seconds)
        if not resuming:
            self._swept_at = self.clock()
        cutoff = now - retention
        pruned = 0
        while pruned < MOST_PER_PASS:
            clusters = await guarded(
                "clusters with old failures",
                lambda: conn.fetch(
                    _SQL["clusters_after"], self._cursor, cutoff, CLUSTERS_PER_BATCH
                ),
            )
            if not clusters:
                self._cursor = None
                return Pruned(self.table, pruned, seconds)
            ids = [r["cluster_id"] for r in clusters]
            pruned += await self._batch(conn, ids, cutoff, dry_run=dry_run)
            self._cursor = ids[-1]
        return Pruned(self.table, pruned, seconds, more=True)

    async def _batch(
        self, conn: asyncpg.Connection, ids: list[UUID], cutoff: datetime, *, dry_run: bool
    ) -> int:
        policy = self.policy

        async def work() -> int:
            async with conn.transaction():
                locked = [r["cluster_id"] for r in await conn.fetch(_SQL["lock_clusters"], ids)]
                if not locked:
                    return 0
                doomed = await conn.fetch(
                    _SQL["doomed"],
                    locked,
                    cutoff,
                    policy.severity.rate_window,
                    policy.evidence_limit,
                )
                if dry_run or not doomed:
                    return len(doomed)
                done = await conn.fetchrow(_SQL["prune"], [r["failure_id"] for r in doomed])
                assert done is not None  # noqa: S101 - the statement always returns one row
                return int(done["pruned"])

        return await guarded("prune failures", work)


def tasks(settings: Settings) -> list[RetentionTask]:
    """The feature's tables for `spectral maintenance` (declared in plugin.py): the failures,
    pruned; the rule-stub leases (paid calls), kept by design and measured."""
    seconds = ClusterSettings.of(settings).cluster_failure_retention_seconds
    policy = ClusterPolicy(failure_retention=timedelta(seconds=seconds) if seconds else None)
    return [
        FailureRetention(policy),
        Measured("clusters.rule_stub_leases", "paid rule-stub calls: kept by design"),
    ]
