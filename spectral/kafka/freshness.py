"""The ``outbox.ready_at`` record header: when a record's outbox row became publishable.

The outbox relay writes it on every record (RFC 3339 in the contract's written form, UTC, the
producer database's clock: the row's write, or its ``available_at`` when delayed). A consumer
reads it after the transaction that applied the record committed, and the difference is the
record's end-to-end freshness (outbox write to projection commit). It is informational: records
without it, or with a header no clock could have written, are simply not measured.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Final

READY_AT_HEADER: Final = "outbox.ready_at"
_MAX_CHARS: Final = 64
LATENCY_BUCKETS: Final = (
    0.0025,
    0.005,
    0.01,
    0.02,
    0.03,
    0.04,
    0.05,
    0.075,
    0.1,
    0.15,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    300,
)
"""Histogram buckets of the times measured from ``outbox.ready_at`` (the relay's delay, the
consumer's freshness): fine below 100 ms (the freshness target), coarse above it."""


class _Last:
    """The header value :func:`ready_at` read last, and what it gave: the records of one writer
    statement share their value and mostly come one after another."""

    value: bytes = b""
    moment: float | None = None


_LAST: Final = _Last()


def ready_at(headers: Iterable[tuple[str, bytes | None]]) -> float | None:
    """The ``outbox.ready_at`` of a record's headers as a UNIX time, or None when it is absent
    or not a timestamp with an offset (hostile bytes included: this never raises)."""
    for key, value in headers:
        if key != READY_AT_HEADER:
            continue
        if not value or len(value) > _MAX_CHARS:
            return None
        last = _LAST
        if value == last.value:
            return last.moment
        moment = _moment(value)
        last.value, last.moment = value, moment
        return moment
    return None


def _moment(value: bytes) -> float | None:
    try:
        moment = datetime.fromisoformat(value.decode("ascii"))
        if moment.tzinfo is None:
            return None
        return moment.timestamp()
    except (ValueError, OverflowError):
        return None
