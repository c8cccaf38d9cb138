"""The transactional outbox, writer side: events commit together with the state change.

A producer that changes its state and wants the world to hear about it calls ``enqueue`` with
the connection of the transaction that makes the change. The envelope is encoded here, once,
with the contracts' ``encode`` and stored as the exact bytes the relay will publish (the relay
never re-encodes), so the hash, the key and the bytes on the topic are those the producer built.
Either both the state change and its events commit, or neither does: no ghost events (published
for a change that rolled back) and no zombie changes (committed but never announced).

Per-key order: the relay (``spectral outbox relay``) publishes the rows of one record key in id
order. Ids grow in input order within one call, and across transactions in the order the rows
were inserted — so a producer that can write the same key from two transactions at once must
serialise those transactions per key (hold the entity's row lock, as FailureClusterService does
with its cluster row) to make id order equal commit order for that key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from contracts import EventEnvelope, EventRegistry
from spectral.db.connect import Conn
from spectral.db.queries import load_queries
from spectral.plugins import installed_registry

_SQL = load_queries(Path(__file__).with_name("writer.sql"))


@dataclass(frozen=True)
class OutboxItem:
    """One event to publish: its envelope, the record key (the entity it is about) and, for a
    delayed event, the earliest time it may be published (``None`` = as soon as committed). A
    time not later than the write (the database's clock at the INSERT) is no delay: the row is
    publishable at once, whatever the clock does afterwards. A delayed row holds back the later
    rows of its key until its time comes."""

    envelope: EventEnvelope[Any]
    key: str
    available_at: datetime | None = None


async def enqueue(
    conn: Conn, items: Sequence[OutboxItem], *, events: EventRegistry | None = None
) -> list[int]:
    """Insert ``items`` into core.outbox in the caller's transaction; return their ids in input
    order. One set-based statement whatever the number of items; nothing happens for none.

    Each envelope is encoded (and checked) with ``events``: spectral's event types and those of
    every installed plugin unless given, so a plugin's producer enqueues its own events."""
    if not items:
        return []
    encode = (events or installed_registry()).encode
    for item in items:
        if item.available_at is not None and item.available_at.tzinfo is None:
            raise ValueError("OutboxItem.available_at must be timezone-aware")
    rows = await conn.fetch(
        _SQL["enqueue"],
        [item.envelope.event_type for item in items],
        [item.key for item in items],
        [item.envelope.idempotency_key for item in items],
        [encode(item.envelope) for item in items],
        [item.available_at for item in items],
    )
    # Identity values are drawn as the ordered rows are inserted, so ascending ids are input order.
    return sorted(int(row["id"]) for row in rows)
