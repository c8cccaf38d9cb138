"""Statuses, kinds and frozen views of threads, work items and ledger entries (ADR-035 §6)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any
from uuid import UUID


class ThreadKind(StrEnum):
    STORY_GENERATE_EPIC = "story_generate_epic"
    STORY_GENERATE_ALL = "story_generate_all"
    RULE_STUB = "rule_stub"
    """The suggested rule stub of one failure cluster's content (producers/clusters/stub.py)."""


class ThreadStatus(StrEnum):
    OPEN = "open"
    RUNNING = "running"
    COMPLETE = "complete"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def active(self) -> bool:
        return self in ACTIVE_THREAD_STATUSES

    @property
    def terminal(self) -> bool:
        return not self.active


ACTIVE_THREAD_STATUSES = frozenset({ThreadStatus.OPEN, ThreadStatus.RUNNING})


class ItemStatus(StrEnum):
    """``failed`` = the last attempt failed transiently and a retry waits for ``not_before``;
    ``parked`` = waiting for its org's budget (nothing paid, nothing failed; it resumes when
    the budget allows); the terminal states are ``applied``, ``dead_letter`` and ``canceled``."""

    QUEUED = "queued"
    CLAIMED = "claimed"
    RUNNING = "running"
    APPLIED = "applied"
    FAILED = "failed"
    DEAD_LETTER = "dead_letter"
    PARKED = "parked"
    CANCELED = "canceled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_ITEM_STATUSES


TERMINAL_ITEM_STATUSES = frozenset(
    {ItemStatus.APPLIED, ItemStatus.DEAD_LETTER, ItemStatus.CANCELED}
)
WAITING_ITEM_STATUSES = frozenset({ItemStatus.QUEUED, ItemStatus.FAILED, ItemStatus.PARKED})
"""Live items no worker holds: a cancellation ends them at once."""


class Priority(StrEnum):
    """The priority a command gives its items (a small fixed set; see priority.py)."""

    HIGH = "high"
    NORMAL = "normal"
    LOW = "low"


class EntryType(StrEnum):
    PROMPT = "prompt"
    RESPONSE = "response"
    PARSE_REPORT = "parse_report"
    MUTATION_REPORT = "mutation_report"
    ERROR = "error"


SPACE_PROJECT = "project"
STORY_FUNCTION_KEY = "story_generate"
"""The synthesizer function of story generation (the router maps it to a model)."""


@dataclass(frozen=True)
class Thread:
    thread_id: UUID
    kind: ThreadKind
    space_type: str
    space_id: str
    target_ref: Mapping[str, Any]
    status: ThreadStatus
    parent_thread_id: UUID | None
    idempotency_key: str
    continue_on_error: bool
    outcome: Mapping[str, Any] | None
    created_at: datetime
    updated_at: datetime
    closed_at: datetime | None
    requested_by: str | None = None
    """The principal whose command created the thread (token:NAME, or db:LOGIN), as the
    creating session declared it."""
    requested_by_login: str | None = None
    """The database login that created the thread (cannot be declared)."""
    cancel_requested_at: datetime | None = None
    cancel_requested_by: str | None = None
    cancel_reason: str | None = None


@dataclass(frozen=True)
class WorkItem:
    work_item_id: UUID
    thread_id: UUID
    sequence: int
    status: ItemStatus
    attempt: int
    lock_scope: str
    project_id: str
    function_key: str
    input: Mapping[str, Any]
    not_before: datetime
    lease_token: UUID | None
    leased_at: datetime | None
    error_message: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    priority: Priority = Priority.NORMAL
    tenant: str | None = None
    """What fair claims share capacity by: ``org:{org_id}``, else ``project:{project_id}``."""
    org_id: str | None = None
    cancel_requested_at: datetime | None = None
    park_reason: str | None = None
    route: str | None = None
    """The model the current lease's call goes to (provider limits)."""


@dataclass(frozen=True)
class LedgerEntry:
    entry_id: UUID
    seq: int
    thread_id: UUID
    work_item_id: UUID | None
    attempt: int
    entry_type: EntryType
    payload: Mapping[str, Any]
    hash: str
    created_at: datetime


@dataclass(frozen=True)
class ThreadView:
    """What ``GET /threads/{id}`` and ``spectral threads show`` return."""

    thread: Thread
    items: tuple[WorkItem, ...] = ()
    child_summary: Mapping[str, int] | None = None
    children: tuple[Thread, ...] = field(default=())
