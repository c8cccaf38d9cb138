"""Waiting out the database: retry an operation for as long as the database is unavailable;
and telling a refusal of the data itself from every other failure.

The executor never gives up on a write because PostgreSQL is away (invariant 3: an
infrastructure failure pauses and retries) — not the recording of a paid answer, not the
conclusion of an item. Every statement it retries is guarded by the item's lease token (or is
an idempotent insert), so a retry after a commit whose acknowledgement was lost changes
nothing twice. A failure that is not an outage is raised at once, for the caller to end the
item it belongs to. Cancellation (shutdown) interrupts the wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg

from spectral.db.connect import is_transient
from spectral.observability.logging import get_logger
from spectral.retry import Backoff

log = get_logger(__name__)

T = TypeVar("T")

_LOG_EVERY = 10


async def patiently(
    what: str,
    operation: Callable[[], Awaitable[T]],
    *,
    backoff: Backoff,
    on_retry: Callable[[], None] | None = None,
) -> T:
    """``await operation()``, retried with ``backoff`` while it fails for an outage."""
    retry = 0
    while True:
        try:
            return await operation()
        except Exception as exc:
            if not is_transient(exc):
                raise
            retry += 1
            if on_retry is not None:
                on_retry()
            if retry == 1 or retry % _LOG_EVERY == 0:
                log.warning(
                    "database unavailable; waiting for it",
                    operation=what,
                    retries=retry,
                    error=f"{type(exc).__name__}: {exc}"[:300],
                )
            await asyncio.sleep(backoff.delay(retry))


_DATA_CLASSES = ("22", "23")  # data exception, integrity constraint violation


def is_data_error(exc: BaseException) -> bool:
    """True when the database refused the values themselves (a text it cannot store, a value
    out of range, a broken constraint) — or the driver could not even encode them. Retrying the
    same values cannot help; a read-only session, a missing privilege or an outage are not
    this (the same write may succeed elsewhere or later)."""
    if isinstance(exc, UnicodeError):
        return True
    if isinstance(exc, asyncpg.PostgresError):
        state = getattr(exc, "sqlstate", None) or ""
        return state.startswith(_DATA_CLASSES)
    return False
