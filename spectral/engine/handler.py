"""The contract between the consumer engine and the projections it runs.

The engine owns Kafka, decoding, dedup, transactions, dead letters and offsets; a handler owns
only its effect: ``apply`` writes the new deliveries with set-based SQL inside the engine's
transaction and says which were stale and which it refuses. Every other lifecycle step
(``start``, ``periodic``, ``after_commit``, ``drain``, ``close``, ``rebuild``) is a documented
method with a no-op default. Which steps run in a live consumer, a replay, a dry run or a
rebuild, and the flow of one batch: docs/explanation/consumer-engine.md ("The handler
contract").
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Generic, TypeVar
from uuid import UUID

import asyncpg
import msgspec
from msgspec.structs import force_setattr

from contracts import EventEnvelope

C = TypeVar("C")
"""What a handler carries from ``apply`` to ``after_commit`` (one item per unit of work)."""


class Outcome(StrEnum):
    """What became of one consumed record. The label set of the engine's counters."""

    APPLIED = "applied"
    STALE = "stale"
    DEDUPLICATED = "deduplicated"
    DEAD_LETTERED = "dead_lettered"


class Delivery(msgspec.Struct, frozen=True, gc=False):
    """One decoded record and where it came from.

    ``payload`` is what a handler reads: the event type's *view* (e.g.
    :class:`contracts.failure_cluster.FailureClusterView`) when the handler reads views
    (:attr:`Handler.reads_views`) and the type offers one, else the pydantic payload model.
    ``envelope`` is always the whole pydantic :class:`~contracts.EventEnvelope` (built on first
    access when the record was read as a view: handlers written for envelopes keep working).

    A msgspec struct (built in C, not tracked by the garbage collector): the engine builds one
    per record, positionally. :meth:`of` builds one around an envelope (tests, tools).
    """

    payload: Any
    idempotency_key: str
    event_id: UUID | str
    """The envelope's ``event_id`` (its wire text when the record was read as a view)."""
    topic: str
    partition: int
    offset: int
    key: bytes | None
    raw: bytes
    timestamp_ms: int = 0
    headers: tuple[tuple[str, bytes | None], ...] = ()
    """The record's headers as received (a redriven record carries its dead-letter history)."""
    decoded: EventEnvelope[Any] | Callable[[bytes], EventEnvelope[Any]] | None = None
    """The envelope, or how to decode it from ``raw`` (the record passed every check)."""

    @classmethod
    def of(
        cls,
        envelope: EventEnvelope[Any],
        *,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        raw: bytes,
        timestamp_ms: int = 0,
        headers: tuple[tuple[str, bytes | None], ...] = (),
    ) -> Delivery:
        """The delivery of a record decoded as ``envelope`` (its payload model as ``payload``)."""
        return cls(
            envelope.payload,
            envelope.idempotency_key,
            envelope.event_id,
            topic,
            partition,
            offset,
            key,
            raw,
            timestamp_ms,
            headers,
            envelope,
        )

    @property
    def envelope(self) -> EventEnvelope[Any]:
        """The whole pydantic envelope (decoded from ``raw`` on first access, then kept)."""
        found = self.decoded
        if isinstance(found, EventEnvelope):
            return found
        if found is None:
            raise LookupError("this delivery was built without its envelope")
        envelope = found(self.raw)
        force_setattr(self, "decoded", envelope)
        return envelope

    @property
    def value(self) -> bytes:
        """The record's value bytes (``raw``), as on a Kafka record."""
        return self.raw


@dataclass(frozen=True, slots=True)
class Rejection:
    """A delivery the handler refuses for a data reason: it goes to the dead-letter topic."""

    delivery: Delivery
    reason: str
    detail: str


@dataclass
class HandlerResult(Generic[C]):
    """What ``apply`` reports. Keys not listed as stale and not rejected count as applied."""

    stale: set[str] = field(default_factory=set)
    rejected: list[Rejection] = field(default_factory=list)
    facts: dict[str, int] = field(default_factory=dict)
    """Handler-specific counts for logs, metrics and ``after_commit`` (e.g. {"resurfaced": 2});
    summed when results merge."""
    carry: list[C] = field(default_factory=list)
    """Work for ``after_commit`` (e.g. the items a batch claimed); concatenated on merge."""

    def merge(self, other: HandlerResult[C]) -> HandlerResult[C]:
        """Both results as one: what the one-by-one fallback reports for its batch."""
        facts = dict(self.facts)
        for name, value in other.facts.items():
            facts[name] = facts.get(name, 0) + value
        return HandlerResult(
            stale=self.stale | other.stale,
            rejected=[*self.rejected, *other.rejected],
            facts=facts,
            carry=[*self.carry, *other.carry],
        )


class Rebuild(ABC):
    """How a projection is rebuilt from its topics (``spectral rebuild NAME``,
    spectral/replay/rebuild.py).

    A rebuild is one transaction, acting as the handler's ``database_role``: spectral forgets
    the consumer's dedup keys, :meth:`prepare` resets the projection, every record of the
    handler's topics is applied again through ``apply`` (each batch a savepoint), then
    :meth:`finish` runs; the transaction commits only if every partition was read to its end
    (``--dry-run``: it never commits). Readers see the old projection until that one commit.
    """

    @abstractmethod
    async def prepare(self, conn: asyncpg.Connection) -> None:
        """Reset the projection before the first record (e.g. empty its tables, or keep what
        the topics cannot give back in temporary tables for :meth:`finish`)."""

    async def finish(self, conn: asyncpg.Connection) -> Mapping[str, int]:  # noqa: ARG002
        """After the last record (only when every partition was read): restore what the topics
        could not rebuild; return facts for the report (e.g. rows changed)."""
        return {}


class Handler(ABC, Generic[C]):
    """A projection run by the engine.

    Subclasses give ``name`` (the consumer name used for dedup, dead letters and the default
    consumer group), ``event_types`` (one topic each) and ``apply``; every other member has a
    no-op default. ``C`` is the type of :attr:`HandlerResult.carry`.
    """

    database_role: str | None = None
    """The PostgreSQL role the engine's sessions act as (``SET ROLE`` at connect): the
    privileges of the projection, no more. None: the login's own."""
    reads_views: ClassVar[bool] = False
    """True: ``Delivery.payload`` is the event type's light view where the type offers one
    (checked as strictly, read without building the pydantic models; ``Delivery.envelope``
    still builds them on demand). False (the default, what handlers written before views see):
    every record is decoded into its pydantic envelope, and ``payload`` is its payload."""

    @property
    @abstractmethod
    def name(self) -> str: ...

    @property
    @abstractmethod
    def event_types(self) -> Sequence[str]: ...

    @abstractmethod
    async def apply(
        self, conn: asyncpg.Connection, deliveries: Sequence[Delivery]
    ) -> HandlerResult[C]:
        """Apply the new deliveries inside the engine's transaction (set-based SQL)."""

    def ahead(
        self,
        deliveries: Sequence[Delivery],  # noqa: ARG002 - the default does nothing ahead
    ) -> Callable[[asyncpg.Connection, Sequence[Delivery]], Awaitable[HandlerResult[C]]] | None:
        """Optional: the part of :meth:`apply` that needs no database, done while the batch's
        dedup claim runs in the database instead of after it. ``deliveries`` is every delivery
        of the batch, before any is known to be a duplicate; what this returns finishes
        ``apply`` on the transaction's connection for the new ones (its second argument: the
        deliveries less the duplicates, in their order — all of them, usually, on a live
        stream), as ``apply(conn, new)`` would. It must only compute: no I/O, nothing kept on
        the handler, nothing read that ``apply`` changes on it (through a backlog the next
        batch's claim, and this with it, runs while the batch before it is applied, between
        that batch's statements). None (the default): ``apply`` does it all, after the
        claim. The engine skips it after a claim that found most keys held (a redelivery), and
        for a subclass that overrides ``apply`` but not ``ahead`` (its own ``apply`` is what it
        expects to run)."""
        return None

    async def start(self) -> None:
        """Start background work; called once by a live consumer before its first fetch,
        never by a replay, a dry run or a rebuild."""

    async def periodic(self, pool: asyncpg.Pool) -> None:
        """Chores of a live consumer, every ``periodic_interval`` seconds, never beside a batch
        (``pool``: the engine's connections, acting as ``database_role``)."""

    async def after_commit(self, result: HandlerResult[C]) -> None:
        """Work after a batch's transaction and offsets committed (``result`` is what
        ``apply`` returned, merged over the one-by-one fallback). Never called when the batches
        do not commit (dry runs, rebuilds). Infrastructure faults raised here are retried."""

    async def drain(self) -> None:
        """Wait until the work ``after_commit`` handed over has finished (an applying replay
        calls it once, at its end)."""

    async def close(self) -> None:
        """Stop background work, finish what is in flight within the handler's own bound and
        release resources. Called at the end of every run; must be safe to call again."""

    def rebuild(self) -> Rebuild | None:
        """How ``spectral rebuild`` resets this projection (None: it cannot be rebuilt). The
        object is used apart from the handler's run: it only runs statements on the rebuild's
        connection."""
        return None


@dataclass(frozen=True)
class BatchReport:
    """Counts of one batch, by outcome, plus the handler's facts and dead letters by reason."""

    counts: Mapping[Outcome, int]
    facts: Mapping[str, int]
    dead_letter_reasons: Mapping[str, int] = field(default_factory=dict)
