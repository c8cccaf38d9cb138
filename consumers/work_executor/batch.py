"""A batch's bookkeeping: the jobs held, the answers to conclude, the writes of one
transaction and what each means for its item, and the outcomes reported as items end."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from uuid import UUID

from consumers.work_executor.metrics import AttemptOutcome, ExecutorMetrics, FailureReason
from consumers.work_executor.pool import Job, JobDone
from consumers.work_executor.reads import LoadedItem
from consumers.work_executor.retry import DeadLetterReason, FailureKind
from consumers.work_executor.transitions import (
    AttemptStart,
    BatchWrite,
    CancelEnd,
    DeadLetterEnd,
    MutationApply,
    NewEntry,
    Requeue,
    RetryRelease,
    SpendOutcome,
)
from producers.work.domain.payloads import error_payload
from spectral.db.connect import is_transient
from spectral.observability.logging import get_logger

log = get_logger(__name__)

Failure = tuple[FailureKind, FailureReason, str]


@dataclass(frozen=True)
class Held:
    """A job whose lease this run holds (as far as it knows)."""

    job: Job
    loaded: LoadedItem

    @property
    def item_id(self) -> UUID:
        return self.job[0]

    @property
    def token(self) -> UUID:
        return self.job[1]


@dataclass(frozen=True)
class Answer:
    """What a wave concludes: an answer to validate, or the failure of the call."""

    held: Held
    attempt: int
    content: str | None = ""
    failure: Failure | None = None
    fresh: bool = False  # paid for in this run (not a recorded response reused)
    spend: SpendOutcome | None = None
    """What a failed call's spend reservation becomes (None: settled by its response)."""
    retry_after: float | None = None
    """A rate-limited call: the seconds the gateway asked to wait."""


@dataclass
class Writes:
    """One transaction's worth of a batch's changes, and what each means for its item."""

    starts: list[AttemptStart] = field(default_factory=list)
    applies: list[MutationApply] = field(default_factory=list)
    releases: list[RetryRelease] = field(default_factory=list)
    dead: list[tuple[DeadLetterEnd, DeadLetterReason]] = field(default_factory=list)
    cancels: list[CancelEnd] = field(default_factory=list)
    requeues: list[Requeue] = field(default_factory=list)
    held: dict[UUID, Held] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(
            self.starts
            or self.applies
            or self.releases
            or self.dead
            or self.cancels
            or self.requeues
        )

    def add_held(self, held: Held) -> None:
        self.held[held.item_id] = held

    def merge(self, other: Writes) -> None:
        self.starts.extend(other.starts)
        self.applies.extend(other.applies)
        self.releases.extend(other.releases)
        self.dead.extend(other.dead)
        self.cancels.extend(other.cancels)
        self.requeues.extend(other.requeues)
        self.held.update(other.held)

    def split(self) -> list[Writes]:
        """The same changes, one ``Writes`` per item."""
        parts = {item_id: Writes(held={item_id: one}) for item_id, one in self.held.items()}
        for start in self.starts:
            parts[start.loaded.item.work_item_id].starts.append(start)
        for apply in self.applies:
            parts[apply.loaded.item.work_item_id].applies.append(apply)
        for release in self.releases:
            parts[release.loaded.item.work_item_id].releases.append(release)
        for dead in self.dead:
            parts[dead[0].loaded.item.work_item_id].dead.append(dead)
        for cancel in self.cancels:
            parts[cancel.loaded.item.work_item_id].cancels.append(cancel)
        for requeue in self.requeues:
            parts[requeue.loaded.item.work_item_id].requeues.append(requeue)
        return list(parts.values())

    def attempt_of(self, held: Held) -> int:
        """The attempt this part's changes are about (the item's current one for a start
        that has not happened)."""
        attempts = [
            *(a.attempt for a in self.applies if a.loaded.item.work_item_id == held.item_id),
            *(r.attempt for r in self.releases if r.loaded.item.work_item_id == held.item_id),
            *(d.attempt for d, _ in self.dead if d.loaded.item.work_item_id == held.item_id),
            *(c.attempt for c in self.cancels if c.loaded.item.work_item_id == held.item_id),
        ]
        return max(attempts, default=held.loaded.item.attempt)

    def batch(self) -> BatchWrite:
        return BatchWrite(
            starts=self.starts,
            applies=self.applies,
            releases=self.releases,
            dead_letters=[dead for dead, _ in self.dead],
            cancels=self.cancels,
            requeues=self.requeues,
        )


class Run:
    """The outcomes of one batch, reported per job as each ends."""

    def __init__(self, metrics: ExecutorMetrics, done: JobDone | None) -> None:
        self._metrics = metrics
        self._done = done
        self.outcomes: dict[Job, AttemptOutcome] = {}
        self.parents: dict[UUID, str] = {}

    def end(self, job: Job, outcome: AttemptOutcome) -> None:
        if job in self.outcomes:
            return
        self.outcomes[job] = outcome
        self._metrics.attempt(outcome)
        if self._done is not None:
            self._done(job)

    def ended_item(self, held: Held, outcome: AttemptOutcome) -> None:
        """The item reached a terminal state: its parent (if any) is settled after the batch."""
        parent = held.loaded.parent_thread_id
        if parent is not None:
            self.parents[parent] = held.loaded.item.project_id
        self.end(held.job, outcome)

    def interrupted(self, jobs: Sequence[Job], exc: BaseException) -> None:
        """Nothing more can be done for these items in this run (a bug, or a failure even the
        last-resort dead letter met): their leases stay, and the stale-lease recovery takes
        them up again after the timeout, reading what happened from the ledger."""
        jobs = [job for job in jobs if job not in self.outcomes]
        if not jobs:
            return
        reason = FailureReason.LOAD_ROW if is_transient(exc) else FailureReason.UNKNOWN
        log.error(
            "work items interrupted; they will be recovered",
            work_item_ids=[str(item) for item, _ in jobs],
            error=f"{type(exc).__name__}: {exc}"[:500],
        )
        for job in jobs:
            self._metrics.failure(reason)
            self.end(job, AttemptOutcome.TRANSIENT_FAILURE)


def dead_letter(
    writes: Writes,
    one: Held,
    attempt: int,
    dead: DeadLetterReason,
    *,
    kind: FailureKind,
    reason: FailureReason,
    message: str,
    extra: tuple[NewEntry, ...] = (),
    spend: SpendOutcome | None = None,
) -> None:
    payload = error_payload(
        kind=kind.value,
        reason=reason.value,
        message=message,
        disposition="dead_letter",
        attempt=attempt,
        dead_letter_reason=dead.value,
    )
    writes.dead.append((DeadLetterEnd(one.loaded, one.token, attempt, payload, extra, spend), dead))
