"""Waiting out the database: retry an operation for as long as the database is unavailable.

The executor never gives up on a write because PostgreSQL is away (invariant 3: an
infrastructure failure pauses and retries) — not the recording of a paid answer, not the
conclusion of an item. Every statement it retries is guarded by the item's lease token (or is
an idempotent insert), so a retry after a commit whose acknowledgement was lost changes
nothing twice. A failure that is not an outage is raised at once, for the caller to end the
item it belongs to. Cancellation (shutdown) interrupts the wait. The policy and its log lines
(one when the outage starts, reminders, one when it ends) are the framework's
(``spectral.service.wait_out``); what a fault means is ``spectral.faults``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from spectral.faults import Component
from spectral.retry import Backoff
from spectral.service import wait_out

T = TypeVar("T")


async def patiently(
    what: str,
    operation: Callable[[], Awaitable[T]],
    *,
    backoff: Backoff,
    on_retry: Callable[[], None] | None = None,
) -> T:
    """``await operation()``, retried with ``backoff`` while it fails for an outage."""
    return await wait_out(
        Component.DATABASE,
        operation,
        backoff=backoff,
        on_retry=(lambda _component: on_retry()) if on_retry is not None else None,
        what=what,
    )
