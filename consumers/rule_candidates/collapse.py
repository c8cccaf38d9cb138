"""Which snapshot of a cluster wins, and which are stale (pure policy, no I/O).

Order of snapshots
    Snapshots of one cluster are ordered by
    ``(ordered_at, last_observed_at, failure_count, snapshot_hash)``, compared left to right;
    ``snapshot_hash`` compares as plain code points (the database compares it with
    ``COLLATE "C"``, the same order). ``last_observed_at`` is the ADR's notion of "newer"; a
    cluster observed until the same instant with more failures is the more complete snapshot;
    the hash only makes the order total, so every replica and every replay, whatever order the
    events arrive in, converges on the same stored snapshot.

A producer's clock
    ``ordered_at`` is ``last_observed_at`` capped at the record's Kafka timestamp plus
    :data:`MAX_CLOCK_SKEW` (:func:`ordered_at`). A producer whose clock runs ahead writes
    observation times in the future; uncapped, one such snapshot would make every later real
    snapshot of its cluster stale until the real clock caught up. Capped, it counts as published
    at most five minutes after its record, so real snapshots observed after that win again. The
    record timestamp is stored in the log (the broker's own clock with ``LogAppendTime``, or a
    producer's bounded by the broker's ``log.message.timestamp.after.max.ms``), so every replay
    and rebuild computes the same cap; a record without one (timestamp < 0) is capped by the
    consumer's clock when it is applied. Observation times are stored as written (what was
    hashed); only the order uses the cap.

Stale
    A snapshot is stale when a snapshot of the same cluster that came before it — stored in the
    table, or earlier in the batch (the order of the deliveries, i.e. offset order within a
    partition) — is at least as new. A stale snapshot changes nothing.

Applied
    A snapshot newer than everything before it is applied. When a later delivery of the same
    batch is newer still, the earlier one was applied and then overwritten ("superseded"): the
    batch writes only the newest, which is exactly what applying them one by one would leave.
    If the stored row beats the batch's newest snapshot, every snapshot of that cluster in the
    batch is stale (they are all older than the stored one); otherwise the superseded ones no
    newer than the stored row are stale (the handler compares them with the key the upsert
    returns for the row it replaced).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")

MAX_CLOCK_SKEW: Final = timedelta(minutes=5)
"""How far ahead of its record's timestamp a snapshot's last_observed_at may count."""
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)

OrderKey = tuple[datetime, datetime, int, str]
"""``(ordered_at, last_observed_at, failure_count, snapshot_hash)``: larger is newer."""


def ordered_at(last_observed_at: datetime, record_timestamp_ms: int, now: datetime) -> datetime:
    """``last_observed_at`` capped at the record's timestamp (``now`` when it has none, i.e.
    a negative or zero timestamp) plus :data:`MAX_CLOCK_SKEW`."""
    return min(last_observed_at, latest_order(record_timestamp_ms, now))


def latest_order(record_timestamp_ms: int, now: datetime) -> datetime:
    """The cap :func:`ordered_at` applies to a record with this timestamp (the same for every
    snapshot of the record's timestamp: a batch computes it once per distinct timestamp)."""
    published = (
        _EPOCH + timedelta(milliseconds=record_timestamp_ms) if record_timestamp_ms > 0 else now
    )
    return published + MAX_CLOCK_SKEW


def order_key(
    last_observed_at: datetime,
    failure_count: int,
    snapshot_hash: str,
    *,
    capped_at: datetime | None = None,
) -> OrderKey:
    """The order key; ``capped_at`` is the snapshot's :func:`ordered_at` (default: uncapped)."""
    return (
        last_observed_at if capped_at is None else capped_at,
        last_observed_at,
        failure_count,
        snapshot_hash,
    )


@dataclass(frozen=True, slots=True)
class Collapsed(Generic[K, T]):
    """The outcome of collapsing one batch."""

    winners: dict[K, T]
    """The newest snapshot of each cluster, in order of each cluster's first appearance."""
    superseded: dict[K, list[T]]
    """Per cluster, snapshots applied and then overwritten by a newer one later in the batch, in
    increasing order (each was the newest of its cluster so far when it came)."""
    stale: list[T]
    """Snapshots that arrived after one of the same cluster at least as new."""
    newest: dict[K, OrderKey]
    """The order key of each cluster's winner."""


def collapse(entries: Iterable[tuple[K, OrderKey, T]]) -> Collapsed[K, T]:
    """Collapse ``(cluster, order key, item)`` entries, given in arrival order."""
    newest: dict[K, OrderKey] = {}
    winners: dict[K, T] = {}
    superseded: dict[K, list[T]] = {}
    stale: list[T] = []
    for cluster, key, item in entries:
        best = newest.get(cluster)
        if best is None:
            newest[cluster] = key
            winners[cluster] = item
        elif key > best:
            superseded.setdefault(cluster, []).append(winners[cluster])
            newest[cluster] = key
            winners[cluster] = item
        else:
            stale.append(item)
    return Collapsed(winners, superseded, stale, newest)
