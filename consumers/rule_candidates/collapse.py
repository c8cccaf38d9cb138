"""Which snapshot of a cluster wins, and which are stale (pure policy, no I/O).

Order of snapshots
    Snapshots of one cluster are ordered by ``(last_observed_at, failure_count, snapshot_hash)``,
    compared left to right; ``snapshot_hash`` compares as plain code points (the database compares
    it with ``COLLATE "C"``, the same order). ``last_observed_at`` is the ADR's notion of "newer";
    a cluster observed until the same instant with more failures is the more complete snapshot;
    the hash only makes the order total, so every replica and every replay, whatever order the
    events arrive in, converges on the same stored snapshot.

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
from datetime import datetime
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")

OrderKey = tuple[datetime, int, str]
"""``(last_observed_at, failure_count, snapshot_hash)``: larger is newer."""


def order_key(last_observed_at: datetime, failure_count: int, snapshot_hash: str) -> OrderKey:
    return (last_observed_at, failure_count, snapshot_hash)


@dataclass(frozen=True, slots=True)
class Collapsed(Generic[K, T]):
    """The outcome of collapsing one batch."""

    winners: dict[K, T]
    """The newest snapshot of each cluster, in order of each cluster's first appearance."""
    superseded: dict[K, list[T]]
    """Per cluster, snapshots applied and then overwritten by a newer one later in the batch."""
    stale: list[T]
    """Snapshots that arrived after one of the same cluster at least as new."""


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
    return Collapsed(winners, superseded, stale)
