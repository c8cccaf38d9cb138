"""ADR-035 §6: the durable LLM work stream (threads, work items, ledger entries) as events.

All four types are schema_version 1, source and target ``work``, published by spectral alone
(``open_to_producers=False``: outside producers submit work through the command API). Unknown
fields are kept.
Each type derives its envelope ``idempotency_key`` and its Kafka record key from the payload;
build envelopes with the ``*_event`` helpers so both are right (decode checks the key).

``work.thread.opened`` (:class:`ThreadOpenedPayload`)
    thread_id (UUID), kind (e.g. ``story_generate_epic``), space_type, space_id, target_ref
    (document + optional epic, as text), parent_thread_id (UUID or null; orchestration parent),
    idempotency_key (the thread's semantic identity, ADR-035 §8, as text).
    idempotency_key = ``"{thread_id}"``; record key = ``"{thread_id}"``.

``work.item.enqueued`` (:class:`WorkItemEnqueuedPayload`)
    work_item_id, thread_id (UUIDs), sequence (integer >= 0, order within the thread),
    attempt (integer >= 1), lock_scope (``project`` or ``epic:{id}``), not_before (timestamp;
    not to run earlier), kind, target_ref, input (JSON object handed to the executor).
    idempotency_key = ``"{work_item_id}:{attempt}"``; record key = lock_scope.

``work.item.state_changed`` (:class:`WorkItemStateChangedPayload`)
    work_item_id, thread_id (UUIDs), lock_scope (as in enqueued: it keys the record),
    status (queued | claimed | running | applied | failed | dead_letter), attempt (>= 1),
    error_message (text or null; informational only, ADR-035 §10), state (optional: the item's
    exact state where ``status`` cannot name it — only ``canceled``, announced with status
    ``dead_letter``: the item ended without its mutation, by cancellation; a parked item is
    never announced).
    idempotency_key = ``"{work_item_id}:{status}:{attempt}"``; record key = lock_scope.

``work.ledger.entry_appended`` (:class:`LedgerEntryAppendedPayload`)
    entry_id, thread_id (UUIDs), work_item_id (UUID or null), entry_type (prompt | response |
    parse_report | mutation_report | error), hash (digest of the entry's content as the ledger
    stores it, e.g. 32 hex digits of xxh3-128; opaque to consumers of this event).
    idempotency_key = ``"{entry_id}"``; record key = ``"{thread_id}"``.

UUIDs in keys are lowercase and hyphenated. Record keys keep every event about one lock scope
(work items) or one thread (threads, ledger) on one partition of its topic, in order.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Final, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, JsonValue, StringConstraints

from contracts.envelope import EventEnvelope
from contracts.fields import NonEmptyStr, NonNegativeInt, PositiveInt, UtcDatetime, Uuid
from contracts.spec import EventSpec

WORK_THREAD_OPENED: Final = "work.thread.opened"
WORK_ITEM_ENQUEUED: Final = "work.item.enqueued"
WORK_ITEM_STATE_CHANGED: Final = "work.item.state_changed"
WORK_LEDGER_ENTRY_APPENDED: Final = "work.ledger.entry_appended"
WORK_SCHEMA_VERSION: Final = 1
MAX_ERROR_MESSAGE_CHARS: Final = 10_000

WorkItemStatus = Literal["queued", "claimed", "running", "applied", "failed", "dead_letter"]
"""ADR-035 §6.2 work item states."""

AnnouncedState = Literal["canceled"]
"""The item states a ``state_changed`` event names beside ``status`` because ``status`` cannot:
only ``canceled`` (sent with status ``dead_letter``). A *parked* item (waiting for its org's
budget) is never announced: parking is a scheduling condition, visible on the item."""

LedgerEntryType = Literal["prompt", "response", "parse_report", "mutation_report", "error"]
"""ADR-035 §6.3 ledger entry types."""

ErrorMessage = Annotated[str, StringConstraints(max_length=MAX_ERROR_MESSAGE_CHARS)]

_MODEL_CONFIG: Final = ConfigDict(frozen=True, extra="allow", use_attribute_docstrings=True)


class ThreadOpenedPayload(BaseModel):
    """A thread (one semantic user intent) was created."""

    model_config = _MODEL_CONFIG

    thread_id: Uuid
    """The thread."""
    kind: NonEmptyStr
    """Operation kind, e.g. story_generate_epic or story_generate_all."""
    space_type: NonEmptyStr
    """Kind of space the thread works in, e.g. project."""
    space_id: NonEmptyStr
    """Identifier of that space."""
    target_ref: NonEmptyStr
    """The document (and optional epic) the thread targets, as text."""
    parent_thread_id: Uuid | None = None
    """Orchestration parent (generate-all), or null."""
    idempotency_key: NonEmptyStr
    """The thread's semantic identity (ADR-035 §8), e.g. project:backlog:epic:generate_stories."""


class WorkItemEnqueuedPayload(BaseModel):
    """A work item (one executable unit) was queued, for its first or a later attempt."""

    model_config = _MODEL_CONFIG

    work_item_id: Uuid
    """The work item."""
    thread_id: Uuid
    """Its thread."""
    sequence: NonNegativeInt
    """Order of the item within its thread."""
    attempt: PositiveInt
    """Attempt number, 1 for the first."""
    lock_scope: NonEmptyStr
    """Lock the mutation takes: project or epic:{id}. Also the Kafka record key."""
    not_before: UtcDatetime
    """The item must not run before this time (backoff)."""
    kind: NonEmptyStr
    """Operation kind, as on the thread."""
    target_ref: NonEmptyStr
    """The target of this item, as text."""
    input: dict[str, JsonValue] = Field(default_factory=dict)
    """Free-form JSON object handed to the executor."""


class WorkItemStateChangedPayload(BaseModel):
    """A work item moved to a new status."""

    model_config = _MODEL_CONFIG

    work_item_id: Uuid
    """The work item."""
    thread_id: Uuid
    """Its thread."""
    lock_scope: NonEmptyStr
    """The item's lock scope (as enqueued); the Kafka record key."""
    status: WorkItemStatus
    """The new status."""
    attempt: PositiveInt
    """The attempt the status belongs to."""
    error_message: ErrorMessage | None = None
    """Last error (failed, dead_letter); informational, the ledger is authoritative."""
    state: AnnouncedState | None = None
    """The exact state where status cannot name it: canceled (sent with status dead_letter, the
    item ended without its mutation because its thread was canceled); otherwise absent or null."""


class LedgerEntryAppendedPayload(BaseModel):
    """An immutable ledger entry was recorded."""

    model_config = _MODEL_CONFIG

    entry_id: Uuid
    """The ledger entry."""
    thread_id: Uuid
    """Its thread."""
    work_item_id: Uuid | None = None
    """The work item it belongs to, or null for thread-level entries."""
    entry_type: LedgerEntryType
    """What the entry records."""
    hash: NonEmptyStr
    """Digest of the entry's content as the ledger stores it."""


THREAD_OPENED_SPEC: Final = EventSpec(
    event_type=WORK_THREAD_OPENED,
    schema_version=WORK_SCHEMA_VERSION,
    payload_model=ThreadOpenedPayload,
    idempotency_key=lambda p: str(p.thread_id),
    record_key=lambda p: str(p.thread_id),
    default_source="work",
    default_target="work",
    idempotency_key_rule="{thread_id}",
    record_key_rule="{thread_id}",
    open_to_producers=False,
)
WORK_ITEM_ENQUEUED_SPEC: Final = EventSpec(
    event_type=WORK_ITEM_ENQUEUED,
    schema_version=WORK_SCHEMA_VERSION,
    payload_model=WorkItemEnqueuedPayload,
    idempotency_key=lambda p: f"{p.work_item_id}:{p.attempt}",
    record_key=lambda p: p.lock_scope,
    default_source="work",
    default_target="work",
    idempotency_key_rule="{work_item_id}:{attempt}",
    record_key_rule="{lock_scope}",
    open_to_producers=False,
)
WORK_ITEM_STATE_CHANGED_SPEC: Final = EventSpec(
    event_type=WORK_ITEM_STATE_CHANGED,
    schema_version=WORK_SCHEMA_VERSION,
    payload_model=WorkItemStateChangedPayload,
    idempotency_key=lambda p: f"{p.work_item_id}:{p.status}:{p.attempt}",
    record_key=lambda p: p.lock_scope,
    default_source="work",
    default_target="work",
    idempotency_key_rule="{work_item_id}:{status}:{attempt}",
    record_key_rule="{lock_scope}",
    open_to_producers=False,
)
LEDGER_ENTRY_APPENDED_SPEC: Final = EventSpec(
    event_type=WORK_LEDGER_ENTRY_APPENDED,
    schema_version=WORK_SCHEMA_VERSION,
    payload_model=LedgerEntryAppendedPayload,
    idempotency_key=lambda p: str(p.entry_id),
    record_key=lambda p: str(p.thread_id),
    default_source="work",
    default_target="work",
    idempotency_key_rule="{entry_id}",
    record_key_rule="{thread_id}",
    open_to_producers=False,
)

WORK_SPECS: Final = (
    THREAD_OPENED_SPEC,
    WORK_ITEM_ENQUEUED_SPEC,
    WORK_ITEM_STATE_CHANGED_SPEC,
    LEDGER_ENTRY_APPENDED_SPEC,
)


def thread_opened_event(
    payload: ThreadOpenedPayload,
    *,
    event_id: UUID | None = None,
    occurred_at: datetime | None = None,
    correlation_id: UUID | None = None,
    causation_id: UUID | None = None,
) -> EventEnvelope[ThreadOpenedPayload]:
    """A ``work.thread.opened`` envelope keyed ``{thread_id}``."""
    return THREAD_OPENED_SPEC.envelope(
        payload,
        event_id=event_id,
        occurred_at=occurred_at,
        correlation_id=correlation_id,
        causation_id=causation_id,
    )


def work_item_enqueued_event(
    payload: WorkItemEnqueuedPayload,
    *,
    event_id: UUID | None = None,
    occurred_at: datetime | None = None,
    correlation_id: UUID | None = None,
    causation_id: UUID | None = None,
) -> EventEnvelope[WorkItemEnqueuedPayload]:
    """A ``work.item.enqueued`` envelope keyed ``{work_item_id}:{attempt}``."""
    return WORK_ITEM_ENQUEUED_SPEC.envelope(
        payload,
        event_id=event_id,
        occurred_at=occurred_at,
        correlation_id=correlation_id,
        causation_id=causation_id,
    )


def work_item_state_changed_event(
    payload: WorkItemStateChangedPayload,
    *,
    event_id: UUID | None = None,
    occurred_at: datetime | None = None,
    correlation_id: UUID | None = None,
    causation_id: UUID | None = None,
) -> EventEnvelope[WorkItemStateChangedPayload]:
    """A ``work.item.state_changed`` envelope keyed ``{work_item_id}:{status}:{attempt}``."""
    return WORK_ITEM_STATE_CHANGED_SPEC.envelope(
        payload,
        event_id=event_id,
        occurred_at=occurred_at,
        correlation_id=correlation_id,
        causation_id=causation_id,
    )


def ledger_entry_appended_event(
    payload: LedgerEntryAppendedPayload,
    *,
    event_id: UUID | None = None,
    occurred_at: datetime | None = None,
    correlation_id: UUID | None = None,
    causation_id: UUID | None = None,
) -> EventEnvelope[LedgerEntryAppendedPayload]:
    """A ``work.ledger.entry_appended`` envelope keyed ``{entry_id}``."""
    return LEDGER_ENTRY_APPENDED_SPEC.envelope(
        payload,
        event_id=event_id,
        occurred_at=occurred_at,
        correlation_id=correlation_id,
        causation_id=causation_id,
    )
