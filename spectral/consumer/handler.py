"""The contract between the consumer engine and the projections it runs.

The engine owns Kafka, decoding, dedup, transactions, dead letters and offsets. A handler owns
only its effect: given the deliveries that are new for it, inside the engine's transaction, it
applies them with set-based SQL and says per event whether it was applied or stale, and which
deliveries it refuses for a data reason. It never publishes to Kafka directly; events it wants to
emit go to the outbox in the same transaction.

Flow of one batch (see engine.py):
  1. decode every record; undecodable ones are dead-lettered with the decode reason;
  2. BEGIN; insert (consumer, idempotency_key) into core.event_handled for the batch with
     ON CONFLICT DO NOTHING RETURNING — the returned keys are new, the rest are duplicates
     (the insert also serialises two members racing on the same key);
  3. ``handler.apply(conn, fresh_deliveries)`` → HandlerResult;
  4. keys the handler marks stale get outcome 'stale'; rejected deliveries lose their
     event_handled row (they were not applied) and are dead-lettered;
  5. COMMIT; dead letters are produced and acknowledged; offsets are committed;
  6. ``handler.after_commit(result)`` (optional) runs post-commit work.
If ``apply`` raises a non-transient error, the engine retries the batch one delivery at a time so
one bad record cannot fail its batch-mates; the one that still fails is dead-lettered with reason
``handler_error``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

import asyncpg

from contracts import EventEnvelope


class Outcome(StrEnum):
    """What became of one consumed record. The label set of the engine's counters."""

    APPLIED = "applied"
    STALE = "stale"
    DEDUPLICATED = "deduplicated"
    DEAD_LETTERED = "dead_lettered"


@dataclass(frozen=True, slots=True)
class Delivery:
    """One decoded record and where it came from."""

    envelope: EventEnvelope[Any]
    topic: str
    partition: int
    offset: int
    key: bytes | None
    raw: bytes
    timestamp_ms: int = 0
    # The record's headers as received (a redriven record carries its dead-letter history).
    headers: tuple[tuple[str, bytes], ...] = ()

    @property
    def idempotency_key(self) -> str:
        return self.envelope.idempotency_key


@dataclass(frozen=True, slots=True)
class Rejection:
    """A delivery the handler refuses for a data reason: it goes to the dead-letter topic."""

    delivery: Delivery
    reason: str
    detail: str


@dataclass
class HandlerResult:
    """What ``apply`` reports. Keys not listed as stale and not rejected count as applied."""

    stale: set[str] = field(default_factory=set)
    rejected: list[Rejection] = field(default_factory=list)
    # Handler-specific facts for logs/metrics and after_commit (e.g. {"resurfaced": 2}).
    facts: dict[str, int] = field(default_factory=dict)
    # Anything the handler wants to carry to after_commit.
    carry: Any = None


@runtime_checkable
class Handler(Protocol):
    """A projection run by the engine. ``name`` is the consumer name used for dedup and DLQ."""

    @property
    def name(self) -> str: ...

    @property
    def event_types(self) -> Sequence[str]: ...

    async def apply(
        self, conn: asyncpg.Connection, deliveries: Sequence[Delivery]
    ) -> HandlerResult: ...


@runtime_checkable
class AfterCommit(Protocol):
    """Optional: work a handler does after its transaction committed (before offsets commit)."""

    async def after_commit(self, result: HandlerResult) -> None: ...


@dataclass(frozen=True)
class BatchReport:
    """Counts of one batch, by outcome, plus the handler's facts."""

    counts: Mapping[Outcome, int]
    facts: Mapping[str, int]
