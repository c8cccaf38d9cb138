"""Execution history reconstructed from ledger entries alone (ADR-035 §15: "thread state can
reconstruct execution post-hoc"). Pure: give it the entries of a thread (and of its children),
get per work item the attempts, what was paid for, what was received, and how it ended — plus
the inconsistencies, if any (a hash that does not match its payload, a response without its
prompt, a gap in attempt numbers).

Payloads written by the executor are typed in ``producers.work.domain.payloads`` (their shapes are
in its docstring); the model that answered is read with ``response_model`` (it may be kept as its
exact code points beside an escaped form).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any
from uuid import UUID

from producers.work.domain.hashing import content_hash
from producers.work.domain.model import EntryType, LedgerEntry
from producers.work.domain.payloads import response_model


class ItemOutcome(StrEnum):
    APPLIED = "applied"
    DEAD_LETTER = "dead_letter"
    RETRY_SCHEDULED = "retry_scheduled"
    IN_FLIGHT = "in_flight"  # a prompt without response or error: the call runs (or ran, unknown)
    RESPONSE_RECORDED = "response_recorded"  # paid for, not yet applied
    NOT_STARTED = "not_started"
    CANCELED = "canceled"  # ended by a cancellation (an answer in flight recorded, not applied)


@dataclass
class AttemptHistory:
    attempt: int
    prompt_at: datetime | None = None
    response_at: datetime | None = None
    model: str | None = None
    errors: list[Mapping[str, Any]] = field(default_factory=list)
    parse_ok: bool | None = None
    mutation: Mapping[str, Any] | None = None

    @property
    def started(self) -> bool:
        """A prompt was recorded: a call was sent (at most one) for this attempt."""
        return self.prompt_at is not None

    @property
    def refused(self) -> bool:
        """The gateway refused the call for capacity (429): it did nothing and charged nothing."""
        return any(e.get("kind") == "rate_limited" for e in self.errors)

    @property
    def paid(self) -> bool:
        """A paid call was made for this attempt (sent, and not refused for capacity)."""
        return self.started and not self.refused


@dataclass
class ItemHistory:
    work_item_id: UUID
    thread_id: UUID
    attempts: dict[int, AttemptHistory] = field(default_factory=dict)
    outcome: ItemOutcome = ItemOutcome.NOT_STARTED
    entries: list[LedgerEntry] = field(default_factory=list)

    @property
    def paid_calls(self) -> int:
        return sum(1 for a in self.attempts.values() if a.paid)

    @property
    def responses(self) -> int:
        return sum(1 for a in self.attempts.values() if a.response_at is not None)


@dataclass(frozen=True)
class History:
    items: Mapping[UUID, ItemHistory]
    problems: tuple[str, ...]

    @property
    def consistent(self) -> bool:
        return not self.problems


def reconstruct(entries: Iterable[LedgerEntry]) -> History:
    """Replay ``entries`` (any order; sorted by seq here) into per-item histories."""
    items: dict[UUID, ItemHistory] = {}
    problems: list[str] = []
    for entry in sorted(entries, key=lambda e: e.seq):
        if content_hash(entry.payload) != entry.hash:
            problems.append(f"entry {entry.entry_id}: hash does not match its payload")
        if entry.work_item_id is None:
            continue
        item = items.get(entry.work_item_id)
        if item is None:
            item = items[entry.work_item_id] = ItemHistory(entry.work_item_id, entry.thread_id)
        item.entries.append(entry)
        _apply(item, entry, problems)
    for item in items.values():
        numbers = sorted(n for n, a in item.attempts.items() if a.started)
        if numbers and numbers != list(range(1, len(numbers) + 1)):
            problems.append(f"item {item.work_item_id}: paid attempts {numbers} are not 1..n")
        item.outcome = _outcome(item)
    return History(items=items, problems=tuple(problems))


def _apply(item: ItemHistory, entry: LedgerEntry, problems: list[str]) -> None:
    attempt = item.attempts.setdefault(entry.attempt, AttemptHistory(entry.attempt))
    payload = entry.payload
    if entry.entry_type is EntryType.PROMPT:
        attempt.prompt_at = entry.created_at
    elif entry.entry_type is EntryType.RESPONSE:
        if attempt.prompt_at is None:
            problems.append(
                f"item {item.work_item_id}: response of attempt {entry.attempt} has no prompt"
            )
        attempt.response_at = entry.created_at
        attempt.model = response_model(payload)
    elif entry.entry_type is EntryType.PARSE_REPORT:
        attempt.parse_ok = bool(payload.get("ok"))
    elif entry.entry_type is EntryType.MUTATION_REPORT:
        attempt.mutation = payload
    elif entry.entry_type is EntryType.ERROR:
        attempt.errors.append(payload)


_ENDED_BY = {"dead_letter": ItemOutcome.DEAD_LETTER, "canceled": ItemOutcome.CANCELED}
"""What an ``error`` entry's disposition says about its item, when it is the last entry."""


def _outcome(item: ItemHistory) -> ItemOutcome:
    last = item.entries[-1] if item.entries else None
    if last is None:
        return ItemOutcome.NOT_STARTED
    if any(a.mutation is not None for a in item.attempts.values()):
        return ItemOutcome.APPLIED
    if last.entry_type is EntryType.ERROR and last.payload.get("disposition") == "reissue":
        return ItemOutcome.IN_FLIGHT  # its unknown call was sent again under the same key
    if last.entry_type is EntryType.ERROR:
        return _ENDED_BY.get(str(last.payload.get("disposition")), ItemOutcome.RETRY_SCHEDULED)
    if any(a.response_at is not None and a.parse_ok is not False for a in item.attempts.values()):
        return ItemOutcome.RESPONSE_RECORDED
    return ItemOutcome.IN_FLIGHT


def describe(entry: LedgerEntry) -> str:
    """One human line per entry (``spectral threads history``)."""
    p = entry.payload
    if entry.entry_type is EntryType.PROMPT:
        detail = (
            f"paid call started, function {p.get('function_key')}, key {p.get('idempotency_key')}"
        )
    elif entry.entry_type is EntryType.RESPONSE:
        detail = (
            f"response from {p.get('model')} in {p.get('duration_ms')} ms, usage {p.get('usage')}"
        )
    elif entry.entry_type is EntryType.PARSE_REPORT:
        detail = (
            f"valid, {p.get('story_count')} {'story' if p.get('story_count') == 1 else 'stories'}"
            if p.get("ok")
            else f"INVALID: {'; '.join(str(e) for e in p.get('errors', []))[:200]}"
        )
    elif entry.entry_type is EntryType.MUTATION_REPORT:
        detail = (
            f"{p.get('operation')} on {p.get('document_id')} epic {p.get('epic_id')}: "
            f"version {p.get('base_version')} -> {p.get('result_version')}"
        )
    else:
        detail = (
            f"{p.get('kind')} ({p.get('reason')}): {p.get('message')} -> {p.get('disposition')}"
        )
        if p.get("not_before"):
            detail += f" at {p.get('not_before')}"
    return detail
