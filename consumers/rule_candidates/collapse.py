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
from datetime import timedelta
from typing import Final, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")

MAX_CLOCK_SKEW: Final = timedelta(minutes=5)
"""How far ahead of its record's timestamp a snapshot's last_observed_at may count."""
MAX_CLOCK_SKEW_US: Final = MAX_CLOCK_SKEW // timedelta(microseconds=1)
""":data:`MAX_CLOCK_SKEW` in microseconds."""

OrderKey = tuple[int, int, int, str]
"""``(ordered_at, last_observed_at, failure_count, snapshot_hash)``, the two times in whole
microseconds since the Unix epoch (a view's ``last_observed_us``, contracts/fields.py
``epoch_micros``): larger is newer. Integers compare in C, and go to the database as they are."""


def ordered_at(last_observed_us: int, record_timestamp_ms: int, now_us: int) -> int:
    """``last_observed_us`` capped at the record's timestamp (``now_us`` when it has none, i.e.
    a negative or zero timestamp) plus :data:`MAX_CLOCK_SKEW`; every time in microseconds."""
    return min(last_observed_us, latest_order(record_timestamp_ms, now_us))


def latest_order(record_timestamp_ms: int, now_us: int) -> int:
    """The cap :func:`ordered_at` applies to a record with this timestamp (the same for every
    snapshot of the record's timestamp), in microseconds."""
    published = record_timestamp_ms * 1000 if record_timestamp_ms > 0 else now_us
    return published + MAX_CLOCK_SKEW_US


def order_key(
    last_observed_us: int,
    failure_count: int,
    snapshot_hash: str,
    *,
    capped_at: int | None = None,
) -> OrderKey:
    """The order key; ``capped_at`` is the snapshot's :func:`ordered_at` (default: uncapped)."""
    return (
        last_observed_us if capped_at is None else capped_at,
        last_observed_us,
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
