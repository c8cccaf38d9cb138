"""Outbox items of the work stream (contracts.work), built from the rows they announce.

Every state change of the work domain is written with its event in the same transaction
(``spectral.outbox.writer.enqueue``). Record keys: the item's lock scope for item events (one epic's
events stay in order on one partition), the thread id for thread and ledger events.
``correlation_id`` is the root thread of the intent (the parent of an orchestration), so every
event of one user intent can be followed across topics.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final
from uuid import UUID

from contracts import (
    LedgerEntryAppendedPayload,
    ThreadOpenedPayload,
    WorkItemEnqueuedPayload,
    WorkItemStateChangedPayload,
    ledger_entry_appended_event,
    thread_opened_event,
    work_item_enqueued_event,
    work_item_state_changed_event,
)
from contracts.work import WORK_SPECS
from producers.work.domain.model import EntryType, ItemStatus
from spectral.outbox.writer import OutboxItem

SPECS: Final = WORK_SPECS
"""The event types this feature registers (plugin.py)."""


def target_ref_text(target_ref: Mapping[str, Any]) -> str:
    """``{document_id}`` or ``{document_id}/{epic_id}``: the text form events carry."""
    document = str(target_ref["document_id"])
    epic = target_ref.get("epic_id")
    return f"{document}/{epic}" if epic else document


def thread_opened(
    *,
    thread_id: UUID,
    kind: str,
    space_type: str,
    space_id: str,
    target_ref: Mapping[str, Any],
    parent_thread_id: UUID | None,
    idempotency_key: str,
) -> OutboxItem:
    payload = ThreadOpenedPayload(
        thread_id=thread_id,
        kind=kind,
        space_type=space_type,
        space_id=space_id,
        target_ref=target_ref_text(target_ref),
        parent_thread_id=parent_thread_id,
        idempotency_key=idempotency_key,
    )
    envelope = thread_opened_event(payload, correlation_id=parent_thread_id or thread_id)
    return OutboxItem(envelope=envelope, key=str(thread_id))


def item_enqueued(
    *,
    work_item_id: UUID,
    thread_id: UUID,
    sequence: int,
    attempt: int,
    lock_scope: str,
    not_before: datetime,
    kind: str,
    target_ref: Mapping[str, Any],
    input_: Mapping[str, Any],
    correlation_id: UUID | None = None,
    now: datetime | None = None,
) -> OutboxItem:
    """The wake-up of attempt ``attempt``; published no earlier than ``not_before``."""
    payload = WorkItemEnqueuedPayload(
        work_item_id=work_item_id,
        thread_id=thread_id,
        sequence=sequence,
        attempt=attempt,
        lock_scope=lock_scope,
        not_before=not_before,
        kind=kind,
        target_ref=target_ref_text(target_ref),
        input=dict(input_),
    )
    envelope = work_item_enqueued_event(payload, correlation_id=correlation_id or thread_id)
    later = not_before > (now or datetime.now(UTC))
    return OutboxItem(envelope=envelope, key=lock_scope, available_at=not_before if later else None)


def item_state_changed(
    *,
    work_item_id: UUID,
    thread_id: UUID,
    lock_scope: str,
    status: ItemStatus,
    attempt: int,
    error_message: str | None = None,
    correlation_id: UUID | None = None,
) -> OutboxItem:
    if status is ItemStatus.PARKED:
        raise ValueError("parking is a scheduling condition, not announced as a state change")
    canceled = status is ItemStatus.CANCELED
    payload = WorkItemStateChangedPayload(
        work_item_id=work_item_id,
        thread_id=thread_id,
        lock_scope=lock_scope,
        # The contract's status vocabulary is ADR-035's: a canceled item ended without its
        # mutation, announced as dead_letter with its exact state beside it.
        status=ItemStatus.DEAD_LETTER.value if canceled else status.value,
        attempt=max(attempt, 1),
        error_message=error_message[:10_000] if error_message else None,
        state=status.value if canceled else None,
    )
    envelope = work_item_state_changed_event(payload, correlation_id=correlation_id or thread_id)
    return OutboxItem(envelope=envelope, key=lock_scope)


def entry_appended(
    *,
    entry_id: UUID,
    thread_id: UUID,
    work_item_id: UUID | None,
    entry_type: EntryType,
    entry_hash: str,
    correlation_id: UUID | None = None,
) -> OutboxItem:
    payload = LedgerEntryAppendedPayload(
        entry_id=entry_id,
        thread_id=thread_id,
        work_item_id=work_item_id,
        entry_type=entry_type.value,
        hash=entry_hash,
    )
    envelope = ledger_entry_appended_event(payload, correlation_id=correlation_id or thread_id)
    return OutboxItem(envelope=envelope, key=str(thread_id))
