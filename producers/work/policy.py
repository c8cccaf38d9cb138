"""What a command does with the latest thread of its semantic identity (ADR-035 §8). Pure.

Top level (the thread the command is about):

* none, or the latest is complete and ``force`` -> CREATE a new thread;
* open | running -> RETURN_EXISTING (never a second live thread for one identity, forced or not);
* complete (not forced) -> NOOP: the existing thread is returned, nothing is enqueued;
* failed | canceled -> RETRY: the same thread reopens with a new work item (§10 "user-triggered
  retry creates a new Work Item on the same Thread").

Children of a generate-all (identity = the single-epic identity of their epic):

* none, or complete and forced -> CREATE a child;
* open | running -> ADOPT it (it becomes a child of this orchestration; its work goes on);
* complete (not forced) -> ADOPT it as an already complete child;
* failed | canceled -> RETRY it as a child (reopened, new work item).
"""

from __future__ import annotations

from enum import StrEnum

from producers.work.domain.model import ThreadStatus


class Action(StrEnum):
    CREATE = "create"
    RETURN_EXISTING = "return_existing"
    NOOP = "noop"
    RETRY = "retry"


class ChildAction(StrEnum):
    CREATE = "create"
    ADOPT = "adopt"
    RETRY = "retry"


class Disposition(StrEnum):
    """What the command did, as reported to the caller."""

    CREATED = "created"
    EXISTING = "existing"
    NOOP = "noop"
    RETRIED = "retried"


def decide(latest: ThreadStatus | None, *, force: bool) -> Action:
    if latest is None:
        return Action.CREATE
    if latest.active:
        return Action.RETURN_EXISTING
    if latest is ThreadStatus.COMPLETE:
        return Action.CREATE if force else Action.NOOP
    return Action.RETRY


def decide_child(latest: ThreadStatus | None, *, force: bool) -> ChildAction:
    if latest is None:
        return ChildAction.CREATE
    if latest.active:
        return ChildAction.ADOPT
    if latest is ThreadStatus.COMPLETE:
        return ChildAction.CREATE if force else ChildAction.ADOPT
    return ChildAction.RETRY


DISPOSITION = {
    Action.CREATE: Disposition.CREATED,
    Action.RETURN_EXISTING: Disposition.EXISTING,
    Action.NOOP: Disposition.NOOP,
    Action.RETRY: Disposition.RETRIED,
}
