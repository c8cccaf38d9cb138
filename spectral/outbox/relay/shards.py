"""Which shards a relay should hold: a pure policy (no I/O), unit-tested.

Per-key order across several relays: the rows of one record key must leave in id order, and two
relays must never publish the same key at once. Keys are hashed into ``SHARD_COUNT`` shards, and
each shard is guarded by a PostgreSQL session advisory lock; a relay reads only the rows of the
shards it holds. A lock is taken or given up only between batches (after the batch's rows were
acknowledged by Kafka and marked published), so at any moment at most one relay has unmarked,
in-flight rows of a shard — the next holder starts exactly after them. If a relay dies, its
session ends, the server drops its locks and another relay takes the shards over, republishing
whatever the dead one had sent but not marked (at-least-once; consumers deduplicate).

Balance: every relay also holds a shared "member" lock, so the relays can count themselves. Each
aims at ``ceil(SHARD_COUNT / members)`` shards: a newcomer picks up shards as the others give
their surplus back, and the survivors take over a dead relay's shards on their next poll.

``SHARD_COUNT`` is a constant, not a setting: relays that disagreed on it would compute different
shards for one key and could publish it concurrently.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Final

from spectral.db.locks import LockClass

SHARD_COUNT = 16
LOCK_CLASS: Final = LockClass.OUTBOX_RELAY
"""The classid of the relay's advisory locks (spectral/db/locks.py)."""
MEMBER_LOCK = 1 << 16  # objid of the shared membership lock (shards are 0..SHARD_COUNT-1)
DOORBELL_BASE = 1 << 17
"""objids DOORBELL_BASE + 0..SHARD_COUNT-1: the doorbell slots (migration ``outbox_wakeup``, whose
trigger and ``core.outbox_await_doorbell`` name the same numbers). A relay sleeps on the slot of
the lowest shard it holds: shards are held by one relay each, so no two relays share a slot."""


def doorbell_slot(held: frozenset[int] | set[int]) -> int | None:
    """The doorbell slot of a relay holding shards ``held`` (None: it holds none)."""
    return min(held) if held else None


def shard_of(record_key: str, shard_count: int = SHARD_COUNT) -> int:
    """The shard of a record key — the same formula as the SQL (queries.sql, fetch_batch)."""
    digest = hashlib.md5(record_key.encode(), usedforsecurity=False).hexdigest()
    return int(digest[:7], 16) % shard_count


def fair_share(members: int, shard_count: int = SHARD_COUNT) -> int:
    """How many shards each of ``members`` relays should hold."""
    return math.ceil(shard_count / max(members, 1))


@dataclass(frozen=True)
class Rebalance:
    """What to do before the next batch: give these back, then try these (at most ``want``)."""

    release: tuple[int, ...]
    candidates: tuple[int, ...]
    want: int


def plan(
    held: frozenset[int], members: int, offset: int, shard_count: int = SHARD_COUNT
) -> Rebalance:
    """Give back the surplus (highest shard numbers first) or ask for the missing shards, trying
    them from ``offset`` onwards (each relay starts at its own offset, so newcomers do not all
    contend for shard 0)."""
    target = fair_share(members, shard_count)
    if len(held) > target:
        surplus = sorted(held, reverse=True)[: len(held) - target]
        return Rebalance(tuple(sorted(surplus)), (), 0)
    order = [(offset + i) % shard_count for i in range(shard_count)]
    candidates = tuple(s for s in order if s not in held)
    return Rebalance((), candidates, target - len(held))
