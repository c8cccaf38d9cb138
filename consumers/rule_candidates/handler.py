"""The rule-candidates projection: failure-cluster snapshots -> the operator triage inbox.

Per batch (inside the engine's transaction, acting as ``spectral_projector``):

1. each delivery is checked for what the table cannot hold (validation.py) -> ``rejected``;
2. the batch is collapsed to each cluster's newest snapshot (collapse.py), which also finds the
   snapshots that arrived after a newer one of their cluster -> ``stale``;
3. one statement upserts the newest snapshots, keeps a stored newer snapshot, marks resurfaced
   clusters and records the signal hour (queries.sql ``upsert_snapshots``); a cluster it did not
   write was beaten by the stored snapshot -> all its snapshots in the batch are ``stale``.

Python work per event is a few attribute reads and one tuple comparison; everything else is
per cluster, and the evidence bundle goes to the database as the record's own bytes.

Metrics are counted in ``after_commit`` from ``HandlerResult.facts`` (a rolled-back attempt
counts nothing; facts survive the engine's one-by-one fallback, which merges them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Final
from uuid import UUID

import asyncpg

from consumers.rule_candidates.churn import BASELINE_WINDOWS, Baseline, ChurnReading, exceeds
from consumers.rule_candidates.churn import baseline as trailing_baseline
from consumers.rule_candidates.churn import reading as churn_reading
from consumers.rule_candidates.collapse import OrderKey, collapse
from consumers.rule_candidates.metrics import RuleCandidateMetrics
from consumers.rule_candidates.repository import Conn, RuleCandidatesRepository, SnapshotRows
from consumers.rule_candidates.validation import check_snapshot
from contracts.failure_cluster import FAILURE_CLUSTER_DETECTED, FailureClusterDetectedPayload
from spectral.consumer.handler import Delivery, HandlerResult, Rejection
from spectral.observability.logging import get_logger

log = get_logger(__name__)

CONSUMER_NAME: Final = "rule-candidates"
DATABASE_ROLE: Final = "spectral_projector"

# Fact names (HandlerResult.facts). Totals appear in the engine's batch log line; the
# severity-qualified ones ("applied:high", ...) feed the metrics in after_commit.
INSERTED: Final = "inserted"
UPDATED: Final = "updated"
SUPERSEDED: Final = "superseded"
RESURFACED: Final = "resurfaced"
_APPLIED: Final = "applied"
_STALE: Final = "stale"
_SEP: Final = ":"


class RuleCandidatesHandler:
    """The ``rule-candidates`` deployment's handler (see spectral/consumer/handler.py)."""

    name: Final = CONSUMER_NAME
    event_types: Final = (FAILURE_CLUSTER_DETECTED,)
    database_role: Final = DATABASE_ROLE
    """The engine creates its pool acting as this role: no privilege on operator columns."""

    def __init__(
        self,
        metrics: RuleCandidateMetrics,
        repository: RuleCandidatesRepository | None = None,
    ) -> None:
        self.metrics = metrics
        self.repository = repository or RuleCandidatesRepository()
        self._baseline: Baseline | None = None
        self._alarming = False

    # -- the batch -------------------------------------------------------------------------

    async def apply(self, conn: Conn, deliveries: Sequence[Delivery]) -> HandlerResult:
        result = HandlerResult()
        entries: list[tuple[UUID, OrderKey, Delivery]] = []
        for delivery in deliveries:
            payload: FailureClusterDetectedPayload = delivery.envelope.payload
            problem = check_snapshot(payload.failure_count, delivery.raw)
            if problem is not None:
                result.rejected.append(Rejection(delivery, problem[0].value, problem[1]))
                continue
            entries.append(
                (
                    payload.cluster_id,
                    (payload.last_observed_at, payload.failure_count, payload.snapshot_hash),
                    delivery,
                )
            )
        collapsed = collapse(entries)
        written = {
            row.cluster_id: row
            for row in await self.repository.upsert(conn, _rows(collapsed.winners.values()))
        }

        facts: Counter[str] = Counter()
        stale: list[Delivery] = list(collapsed.stale)
        for cluster_id, winner in collapsed.winners.items():
            earlier = collapsed.superseded.get(cluster_id, ())
            row = written.get(cluster_id)
            if row is None:  # the stored snapshot is at least as new as the batch's newest
                stale.append(winner)
                stale.extend(earlier)
                continue
            severity = _severity(winner)
            facts[INSERTED if row.inserted else UPDATED] += 1
            facts[f"{INSERTED if row.inserted else UPDATED}{_SEP}{severity}"] += 1
            facts[SUPERSEDED] += len(earlier)
            if row.resurfaced:
                facts[RESURFACED] += 1
                facts[f"{RESURFACED}{_SEP}{severity}"] += 1
            facts[f"{_APPLIED}{_SEP}{severity}"] += 1
            for delivery in earlier:
                facts[f"{_APPLIED}{_SEP}{_severity(delivery)}"] += 1
        for delivery in stale:
            facts[f"{_STALE}{_SEP}{_severity(delivery)}"] += 1
        result.stale = {delivery.idempotency_key for delivery in stale}
        result.facts = {name: count for name, count in facts.items() if count}
        result.facts.setdefault(RESURFACED, 0)
        return result

    async def after_commit(self, result: HandlerResult) -> None:
        """Count what the committed transaction did (never a rolled-back attempt)."""
        by_kind: dict[str, dict[str, int]] = {}
        for fact, count in result.facts.items():
            kind, sep, severity = fact.partition(_SEP)
            if sep:
                by_kind.setdefault(kind, {})[severity] = count
        self.metrics.count_snapshots(_APPLIED, by_kind.get(_APPLIED, {}))
        self.metrics.count_snapshots(_STALE, by_kind.get(_STALE, {}))
        self.metrics.count_new_clusters(by_kind.get(INSERTED, {}))
        self.metrics.count_resurfaced(by_kind.get(RESURFACED, {}))
        for rejection in result.rejected:
            self.metrics.count_rejected(rejection.reason)

    # -- the churn gauge -------------------------------------------------------------------

    async def periodic(self, pool: asyncpg.Pool) -> None:
        """Called by the engine every ``periodic_interval`` seconds: refresh the churn gauges."""
        async with pool.acquire() as conn:
            await self.refresh_churn(conn)

    async def refresh_churn(self, conn: Conn) -> ChurnReading:
        """Read the churn windows and set the gauges.

        The current window is read every time (24 hour buckets); the 7-day baseline and the
        pruning of old buckets change only when the hour bucket does, so they run once an hour.
        """
        current = await self.repository.churn_windows(conn, 0, 0)
        if self._baseline is None or self._baseline.hour != current.current_hour:
            self._baseline = await self._read_baseline(conn, current.current_hour)
        value = churn_reading(current.windows[0].clusters, self._baseline)
        self.metrics.set_churn(value)
        alarming = exceeds(value)
        if alarming != self._alarming:
            self._alarming = alarming
            (log.warning if alarming else log.info)(
                "cluster_id churn above baseline" if alarming else "cluster_id churn normal",
                distinct_24h=value.distinct_24h,
                baseline_24h=round(value.baseline_24h, 2),
                baseline_windows=value.baseline_windows,
            )
        return value

    async def _read_baseline(self, conn: Conn, hour: datetime) -> Baseline:
        await self.repository.prune_signals(conn)
        previous = await self.repository.churn_windows(conn, 1, BASELINE_WINDOWS)
        return trailing_baseline(hour, previous.windows)


def _severity(delivery: Delivery) -> str:
    payload: FailureClusterDetectedPayload = delivery.envelope.payload
    return payload.severity


def _rows(winners: Iterable[Delivery]) -> SnapshotRows:
    rows = SnapshotRows([], [], [], [], [], [], [], [], [], [])
    for delivery in winners:
        p: FailureClusterDetectedPayload = delivery.envelope.payload
        rows.cluster_id.append(p.cluster_id)
        rows.snapshot_hash.append(p.snapshot_hash)
        rows.rule_id.append(p.rule_id)
        rows.workspace_id.append(p.workspace_id)
        rows.severity.append(p.severity)
        rows.failure_count.append(p.failure_count)
        rows.first_observed_at.append(p.first_observed_at)
        rows.last_observed_at.append(p.last_observed_at)
        rows.envelope.append(delivery.raw)
        rows.suggested_rule_stub.append(p.suggested_rule_stub)
    return rows
