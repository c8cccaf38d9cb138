"""Priorities of work items and their ageing. Pure.

A command gives its items one of three priorities (``high``, ``normal``, ``low``; default
``normal``). Claims take a tenant's waiting items in ``rank_at`` order, where

    rank_at = the time the item was enqueued + the priority's delay
    delay   = high: 0, normal: 1 x step, low: 3 x step
    step    = SPECTRAL_WORK_PRIORITY_STEP_SECONDS (60 s by default)

This is ageing by construction: an item's rank never moves, while newer items rank later, so a
waiting item is overtaken only by items enqueued less than (its delay - theirs) after it — a
``low`` item by ``normal`` items of the next 2 steps and by ``high`` items of the next 3 steps,
never by anything later, however long the backlog grows. Low priority cannot starve.

The bound is a *count*, not a time: what goes before a waiting item is exactly its tenant's
items ranked before it — those enqueued before it (at no longer a delay) and those of a higher
priority enqueued within its head start. Under a sustained flood of ``high`` items at r per
second, a ``low`` item is overtaken by at most r x 3 steps of them; how long it waits is how
long the executors take to serve what ranks before it (tests/integration/work_executor/
test_fair_claims.py holds this under a flood the claims cannot keep up with). A retried item
keeps its rank (it is ahead of newer items once its backoff has passed), and so does a resumed
parked one.

Priorities order items *within* a tenant; across tenants claims are fair (round-robin, see
consumers/work_executor/schedule.py), so one tenant's ``high`` items never starve another
tenant's ``low`` ones.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

from producers.work.domain.model import Priority

DEFAULT_STEP_SECONDS: Final = 60.0
STEPS: Final = {Priority.HIGH: 0, Priority.NORMAL: 1, Priority.LOW: 3}


def delay(priority: Priority, step_seconds: float = DEFAULT_STEP_SECONDS) -> timedelta:
    """How much later than its enqueue time an item of ``priority`` ranks."""
    if step_seconds < 0:
        raise ValueError("the priority step cannot be negative")
    return timedelta(seconds=STEPS[priority] * step_seconds)


def rank_at(
    enqueued_at: datetime, priority: Priority, step_seconds: float = DEFAULT_STEP_SECONDS
) -> datetime:
    """The rank of an item enqueued at ``enqueued_at``: claims prefer the smallest."""
    return enqueued_at + delay(priority, step_seconds)
