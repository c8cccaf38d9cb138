"""Which triage status an operator may move a cluster to from which (pure policy, no I/O).

    pending   -> in_review | dismissed | resolved   (triage it, or settle it at once)
    in_review -> pending | dismissed | resolved     (hand it back, or settle it)
    dismissed -> pending | in_review                (reopen: it matters after all, or it is back)
    resolved  -> pending | in_review                (reopen: the fix did not hold)

A settled verdict is never swapped for the other one directly (dismissed <-> resolved): the
operator reopens the cluster first, so the change of mind shows as a status change of its own.
Setting the status a cluster already has is allowed and changes nothing (a no-op), so scripts
can apply a desired state idempotently.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from spectral.errors import PermanentError


class Status(StrEnum):
    """The ADR-057 D3 triage states (the CHECK constraint of rule_candidates_pending.status)."""

    PENDING = "pending"
    IN_REVIEW = "in_review"
    DISMISSED = "dismissed"
    RESOLVED = "resolved"


SETTLED: Final = frozenset({Status.DISMISSED, Status.RESOLVED})
"""States in which a newer, different snapshot marks the cluster as resurfaced."""

ALLOWED: Final[dict[Status, frozenset[Status]]] = {
    Status.PENDING: frozenset({Status.IN_REVIEW, Status.DISMISSED, Status.RESOLVED}),
    Status.IN_REVIEW: frozenset({Status.PENDING, Status.DISMISSED, Status.RESOLVED}),
    Status.DISMISSED: frozenset({Status.PENDING, Status.IN_REVIEW}),
    Status.RESOLVED: frozenset({Status.PENDING, Status.IN_REVIEW}),
}

_ORDER: Final = tuple(Status)


class TransitionError(PermanentError):
    """A status change the policy refuses; the message names the allowed targets."""

    def __init__(self, current: Status, target: Status) -> None:
        self.current = current
        self.target = target
        self.allowed = allowed_from(current)
        names = ", ".join(status.value for status in self.allowed)
        super().__init__(
            f"cannot move a cluster from {current.value} to {target.value}; "
            f"allowed from {current.value}: {names}"
        )


def allowed_from(current: Status) -> tuple[Status, ...]:
    """The statuses ``current`` may move to, in declaration order."""
    targets = ALLOWED[current]
    return tuple(status for status in _ORDER if status in targets)


def is_allowed(current: Status, target: Status) -> bool:
    """True when ``current -> target`` is a legal change (or no change at all)."""
    return target == current or target in ALLOWED[current]


def check(current: Status, target: Status) -> bool:
    """Validate ``current -> target``: True if it changes the status, False for a no-op.

    Raises :class:`TransitionError` when the policy refuses it.
    """
    if target == current:
        return False
    if target not in ALLOWED[current]:
        raise TransitionError(current, target)
    return True


def parse_status(value: str) -> Status:
    """A status from its name; ValueError naming the valid ones otherwise."""
    try:
        return Status(value)
    except ValueError:
        names = ", ".join(status.value for status in Status)
        raise ValueError(f"unknown status {value!r}; expected one of: {names}") from None
