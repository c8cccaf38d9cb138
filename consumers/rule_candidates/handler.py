"""The rule-candidates projection: failure-cluster snapshots -> the operator triage inbox.

Per batch (inside the engine's transaction, acting as ``spectral_projector``):

1. each snapshot's order key is built, its last_observed_at capped at the record's timestamp
   plus the allowed clock skew (collapse.py ``ordered_at``: a producer whose clock runs ahead
   cannot freeze its cluster);
2. the batch is collapsed to each cluster's newest snapshot (collapse.py), which also finds the
   snapshots that arrived after a newer one of their cluster -> ``stale``;
3. one statement upserts the newest snapshots, keeps a stored newer snapshot, marks resurfaced
   clusters and records the signal hour (queries.sql ``upsert_snapshots``); a cluster it did not
   write was beaten by the stored snapshot -> all its snapshots in the batch are ``stale``; of a
   cluster it wrote, the superseded snapshots no newer than the snapshot it replaced (returned
   by the same statement) are ``stale`` too — exactly what applying the batch one event at a
   time would record, however the stream is cut into batches.

The handler reads failure-cluster *views* (``reads_views``: no pydantic model is built for a
record). Python work per event is a few attribute reads and one tuple comparison; everything
else is per cluster, and the evidence bundle goes to the database as the record's own bytes.
Clusters are keyed by their UUID's wire text (a ``str``: its hash is computed once and kept,
where ``UUID.__hash__`` and ``__eq__`` are Python code, and collapse hashes every delivery's
cluster at least twice).

Metrics are counted in ``after_commit`` from the typed counts ``apply`` carries
(``HandlerResult.carry``: a rolled-back attempt counts nothing; the engine's one-by-one fallback
merges them); ``HandlerResult.facts`` keeps the totals the batch log line shows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Container, Sequence
from datetime import datetime
from enum import StrEnum
from operator import attrgetter
from time import time_ns
from typing import Final

import asyncpg
from msgspec.structs import astuple

from consumers.rule_candidates.churn import BASELINE_WINDOWS, Baseline, ChurnReading, exceeds
from consumers.rule_candidates.churn import baseline as trailing_baseline
from consumers.rule_candidates.churn import reading as churn_reading
from consumers.rule_candidates.collapse import (
    MAX_CLOCK_SKEW_US,
    Collapsed,
    OrderKey,
    collapse,
    ordered_at,
)
from consumers.rule_candidates.metrics import RuleCandidateMetrics
from consumers.rule_candidates.rebuild import RebuildHooks
from consumers.rule_candidates.repository import RuleCandidatesRepository, SnapshotRow
from contracts.failure_cluster import (
    FAILURE_CLUSTER_DETECTED,
    FailureClusterView,
)
from spectral.db.connect import Conn
from spectral.engine.handler import Delivery, Handler, HandlerResult, Rebuild
from spectral.observability.logging import get_logger

log = get_logger(__name__)

CONSUMER_NAME: Final = "rule-candidates"
DATABASE_ROLE: Final = "spectral_projector"


class Counted(StrEnum):
    """What became of a snapshot, as the metrics count it by severity."""

    INSERTED = "inserted"
    UPDATED = "updated"
    RESURFACED = "resurfaced"
    APPLIED = "applied"
    STALE = "stale"


Counts = Counter[tuple[str, str]]
"""What one ``apply`` did, by (what: a :class:`Counted` value, severity): carried to
``after_commit``. Keyed by plain strings: an enum member hashes through Python code, and a
batch counts every snapshot."""

# Fact names (HandlerResult.facts): the totals of the engine's batch log line and reports.
INSERTED: Final = Counted.INSERTED.value
UPDATED: Final = Counted.UPDATED.value
SUPERSEDED: Final = "superseded"
RESURFACED: Final = Counted.RESURFACED.value
_APPLIED: Final = Counted.APPLIED.value
_STALE: Final = Counted.STALE.value


class RuleCandidatesHandler(Handler[Counts]):
    """The ``rule-candidates`` deployment's handler (see spectral/engine/handler.py): no
    background work; it carries its counts by severity to ``after_commit``."""

    name = CONSUMER_NAME
    event_types = (FAILURE_CLUSTER_DETECTED,)
    database_role = DATABASE_ROLE
    """The engine creates its pool acting as this role: no privilege on operator columns."""
    reads_views = True

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

    async def apply(self, conn: Conn, deliveries: Sequence[Delivery]) -> HandlerResult[Counts]:
        return await self.ahead(deliveries)(conn, deliveries)

    def ahead(
        self, deliveries: Sequence[Delivery]
    ) -> Callable[[Conn, Sequence[Delivery]], Awaitable[HandlerResult[Counts]]]:
        """The batch's order keys, collapsed to each cluster's newest snapshot, and the
        upsert's rows: computed while the engine's dedup claim runs (Handler.ahead); what it
        returns takes the duplicates out (:func:`_without`), writes them and reads the
        answer."""
        now = time_ns() // 1000  # microseconds, as every time of an order key
        entries: list[tuple[str, OrderKey, Delivery]] = []
        for delivery in deliveries:
            payload: FailureClusterView = delivery.payload
            last = payload.last_observed_us
            stamp = delivery.timestamp_ms
            # ordered_at's cap (collapse.py latest_order), inline: a call costs more than it
            cap = (stamp * 1000 if stamp > 0 else now) + MAX_CLOCK_SKEW_US
            entries.append(
                (
                    payload.cluster_id,
                    (
                        last if last <= cap else cap,  # noqa: FURB136 - ordered_at(); min() is a call
                        last,
                        payload.failure_count,
                        payload.snapshot_hash,
                    ),
                    delivery,
                )
            )
        collapsed = collapse(entries)
        rows = _rows(collapsed.winners, collapsed.newest, collapsed.superseded)

        async def written(conn: Conn, fresh: Sequence[Delivery]) -> HandlerResult[Counts]:
            if len(fresh) == len(deliveries):
                return await self._written(conn, collapsed, rows, now)
            less = _without(entries, fresh, collapsed, rows)
            if less is None:  # not the batch less some of it: worked out again
                return await self.ahead(fresh)(conn, fresh)
            return await self._written(conn, *less, now)

        return written

    async def _written(
        self, conn: Conn, collapsed: Collapsed[str, Delivery], rows: list[SnapshotRow], now: int
    ) -> HandlerResult[Counts]:
        """The upsert of ``rows`` (:meth:`ahead`), then the batch's outcomes from its answer."""
        result: HandlerResult[Counts] = HandlerResult()
        written = {row.cluster_id: row for row in await self.repository.upsert(conn, rows)}

        # Severities gathered in lists and counted once each by Counter (in C): a Counter
        # update per snapshot costs a tuple, a hash and a Python-level __missing__.
        inserted: list[str] = []
        updated: list[str] = []
        resurfaced: list[str] = []
        applied: list[Delivery] = []
        stale: list[Delivery] = list(collapsed.stale)
        for cluster, winner in collapsed.winners.items():
            earlier = collapsed.superseded.get(cluster, ())
            row = written.get(cluster)
            if row is None:  # the stored snapshot is at least as new as the batch's newest
                stale.append(winner)
                stale.extend(earlier)
                continue
            if row.prior is not None and earlier:
                # One by one, a superseded snapshot no newer than the stored one was stale.
                cut = _stale_prefix(earlier, row.prior, now)
                if cut:
                    stale.extend(earlier[:cut])
                    earlier = earlier[cut:]
            severity = _severity(winner)
            (inserted if row.inserted else updated).append(severity)
            if row.resurfaced:
                resurfaced.append(severity)
            applied.append(winner)
            applied.extend(earlier)
        counts: Counts = Counter()
        for kind, severities in (
            (INSERTED, inserted),
            (UPDATED, updated),
            (RESURFACED, resurfaced),
            (_APPLIED, map(_SEVERITY_OF, applied)),
            (_STALE, map(_SEVERITY_OF, stale)),
        ):
            for severity, count in Counter(severities).items():
                counts[kind, severity] = count
        result.stale = {delivery.idempotency_key for delivery in stale}
        facts = {
            INSERTED: len(inserted),
            UPDATED: len(updated),
            SUPERSEDED: len(applied) - len(inserted) - len(updated),
            RESURFACED: len(resurfaced),
        }
        result.facts = {name: count for name, count in facts.items() if count}
        result.facts.setdefault(RESURFACED, 0)
        result.carry.append(counts)
        return result

    async def after_commit(self, result: HandlerResult[Counts]) -> None:
        """Count what the committed transaction did (never a rolled-back attempt)."""
        by_kind: dict[str, dict[str, int]] = {kind.value: {} for kind in Counted}
        for counts in result.carry:
            for (kind, severity), count in counts.items():
                by_kind[kind][severity] = by_kind[kind].get(severity, 0) + count
        self.metrics.count_snapshots(Counted.APPLIED, by_kind[_APPLIED])
        self.metrics.count_snapshots(Counted.STALE, by_kind[_STALE])
        self.metrics.count_new_clusters(by_kind[INSERTED])
        self.metrics.count_resurfaced(by_kind[RESURFACED])

    def rebuild(self) -> Rebuild:
        """The inbox rebuilt from the topic, operator columns kept (rebuild.py)."""
        return RebuildHooks()

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


_SEVERITY_OF: Final = attrgetter("payload.severity")
"""A delivery's severity (its view's), read in C."""


def _severity(delivery: Delivery) -> str:
    payload: FailureClusterView = delivery.payload
    return payload.severity


def _order_key(delivery: Delivery, now: int) -> OrderKey:
    """A delivery's order key (collapse.py), ``now`` the batch's clock in microseconds."""
    payload: FailureClusterView = delivery.payload
    last = payload.last_observed_us
    return (
        ordered_at(last, delivery.timestamp_ms, now),
        last,
        payload.failure_count,
        payload.snapshot_hash,
    )


def _stale_prefix(earlier: list[Delivery], prior: OrderKey, now: int) -> int:
    """How many of a cluster's superseded snapshots ``earlier`` are no newer than ``prior``:
    they are in increasing order (collapse.py), so those come first, and the keys are computed
    only up to the first newer one (usually the first: a batch's snapshots are newer than the
    stored one)."""
    for index, delivery in enumerate(earlier):
        if _order_key(delivery, now) > prior:
            return index
    return len(earlier)


def _without(
    entries: list[tuple[str, OrderKey, Delivery]],
    fresh: Sequence[Delivery],
    collapsed: Collapsed[str, Delivery],
    rows: list[SnapshotRow],
) -> tuple[Collapsed[str, Delivery], list[SnapshotRow]] | None:
    """``collapsed`` and ``rows``, worked out from ``entries`` (one per delivery of the batch,
    in its order), for ``fresh``: the batch's deliveries less the duplicates the claim found (a
    few, on a live stream). Only the clusters of the duplicates are collapsed again, from their
    fresh entries, and their rows built again (they then come after the others); ``collapsed``
    is changed in place (:meth:`RuleCandidatesHandler.ahead` made it for this alone). None
    when ``fresh`` is not the batch less some of it, in order."""
    gone: set[int] = set()
    touched: set[str] = set()
    remaining = iter(fresh)
    following = next(remaining, None)
    for cluster, _, delivery in entries:
        if delivery is following:
            following = next(remaining, None)
        else:
            gone.add(id(delivery))
            touched.add(cluster)
    if following is not None:
        return None
    again = collapse(e for e in entries if e[0] in touched and id(e[2]) not in gone)
    winners, newest, superseded = collapsed.winners, collapsed.newest, collapsed.superseded
    for cluster in touched:
        winners.pop(cluster, None)
        newest.pop(cluster, None)
        superseded.pop(cluster, None)
    winners.update(again.winners)
    newest.update(again.newest)
    superseded.update(again.superseded)
    stale = [d for d in collapsed.stale if d.payload.cluster_id not in touched]
    stale.extend(again.stale)
    kept = [row for row in rows if row[0] not in touched]  # a row starts with its cluster_id
    kept.extend(_rows(again.winners, again.newest, again.superseded))
    return Collapsed(winners, superseded, stale, newest), kept


def _rows(
    winners: dict[str, Delivery],
    newest: dict[str, OrderKey],
    superseded: Container[str],
) -> list[SnapshotRow]:
    """The upsert's rows: each cluster's winner's view, its fields in their order (the row
    type's order, repository.py ``SnapshotRow``), then its ``ordered_us`` (its order key's
    first member, ``newest``: collapse.py) — None when it is the last_observed_us itself (not
    capped: the order key holds the same object twice), which the database reads as that (the
    driver encodes a NULL in less time than an integer: migration
    ``projection_ordered_at_may_be_null``) — and whether the snapshot it replaces is wanted
    back: only for a cluster with ``superseded`` snapshots in the batch (the only ones
    :func:`_stale_prefix` compares with it)."""
    # a tuple concatenated, not unpacked: (*t, x) builds a list first (~150 ns more a row)
    return [
        astuple(winner.payload) + (None if key[0] is key[1] else key[0], cluster in superseded)  # noqa: RUF005
        for cluster, winner in winners.items()
        for key in (newest[cluster],)
    ]
