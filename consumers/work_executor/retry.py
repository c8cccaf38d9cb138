"""The one retry strategy of every paid call on the ledger (ADR-0008 §1-2, ADR-035 §10), in
procrastinate's shape: ``RetryStrategy.get_retry_decision`` says, from what failed and which
attempt it was, whether to try again and when (a ``RetryDecision``) or to give up (``GiveUp``,
with the dead-letter reason). Pure: no I/O, no clock (callers pass ``now``). Story generation
and the rule stub share it, its attempt counter and ``CAP_FACTOR``.

* An *attempt* is one paid model call. It is counted when it starts (the ``prompt`` ledger entry
  and ``attempt + 1`` commit together before the call), so a call whose outcome is unknown —
  the worker died or lost its lease mid-call — has used its attempt.
* Transient failure of attempt n (n < max_attempts): retry at ``now + min(base * 2^(n-1),
  base * 10)``; with the defaults (base 1 s, 3 attempts) the schedule is 1 s, 2 s, then give up.
* Permanent failure, or a transient one of the last attempt: dead letter.
* Rate limited (the gateway answered 429: it had no capacity, did not do the call and charged
  nothing): retry after the ``Retry-After`` it asked for (else the first backoff). Waiting for
  capacity is not an attempt: such attempts do not count towards the limit — up to
  ``free_rate_limited`` of them per item, so an item whose gateway only ever answers 429 still
  ends (dead-lettered, max_attempts_exceeded) instead of waiting forever.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from producers.work.domain.settings import WorkSettings
from spectral.retry import Backoff
from spectral.settings import Settings

CAP_FACTOR = 10


class FailureKind(StrEnum):
    TRANSIENT = "transient"
    PERMANENT = "permanent"
    OUTCOME_UNKNOWN = "outcome_unknown"  # a stale lease whose call never recorded a response
    RATE_LIMITED = "rate_limited"  # 429: no capacity, not done, not charged; not an attempt


class DeadLetterReason(StrEnum):
    """Why an item was dead-lettered: the label set of the dead-letter counter."""

    PERMANENT_FAILURE = "permanent_failure"
    INVALID_OUTPUT = "invalid_output"
    MAX_ATTEMPTS_EXCEEDED = "max_attempts_exceeded"
    CANCELED = "canceled"


@dataclass(frozen=True)
class RetryDecision:
    """Try again (attempt ``next_attempt``) once ``not_before`` has passed."""

    not_before: datetime
    next_attempt: int


@dataclass(frozen=True)
class GiveUp:
    reason: DeadLetterReason


@dataclass(frozen=True)
class RetryStrategy:
    max_attempts: int = 3
    base_seconds: float = 1.0
    free_rate_limited: int = 20
    """Rate-limited attempts of one item that do not count towards ``max_attempts``."""

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.base_seconds <= 0:
            raise ValueError("max_attempts >= 1 and base_seconds > 0")

    @classmethod
    def from_settings(cls, settings: Settings) -> RetryStrategy:
        work = WorkSettings.of(settings)
        return cls(work.work_max_attempts, work.work_retry_base_seconds)

    def backoff(self, attempt: int) -> timedelta:
        """Wait after the failure of attempt ``attempt`` (1-based)."""
        backoff = Backoff(base=self.base_seconds, cap=self.base_seconds * CAP_FACTOR)
        return timedelta(seconds=backoff.delay(attempt))

    def may_start_attempt(self, attempts_started: int) -> bool:
        """May another paid call be made after ``attempts_started`` calls (those that count)?"""
        return attempts_started < self.max_attempts

    def counted(self, attempts_started: int, rate_limited: int) -> int:
        """How many of ``attempts_started`` count towards the limit, ``rate_limited`` of them
        having been refused for capacity."""
        return attempts_started - min(rate_limited, self.free_rate_limited)

    def get_retry_decision(
        self, attempt: int, kind: FailureKind, now: datetime
    ) -> RetryDecision | GiveUp:
        """What to do once attempt ``attempt`` failed with ``kind``."""
        if attempt < 1:
            raise ValueError("attempt numbers start at 1")
        if kind is FailureKind.RATE_LIMITED:
            return RetryDecision(not_before=now + self.backoff(1), next_attempt=attempt + 1)
        if kind is FailureKind.PERMANENT:
            return GiveUp(DeadLetterReason.PERMANENT_FAILURE)
        if not self.may_start_attempt(attempt):
            return GiveUp(DeadLetterReason.MAX_ATTEMPTS_EXCEEDED)
        return RetryDecision(not_before=now + self.backoff(attempt), next_attempt=attempt + 1)
