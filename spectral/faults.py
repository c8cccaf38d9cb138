"""What a failure means: one classification of the exceptions spectral meets.

Every retry loop, probe and adapter asks here, so "the database is away" means the same thing
in the consumer engine, the outbox relay, the work executor and the maintenance pass:

* **transient** — the infrastructure, not the data: a connection refused or lost, a server
  shutting down, a timeout, a deadlock, a lock wait past ``lock_timeout``, a broker error the
  Kafka client itself calls retriable. Wait it out (pause, back off, retry); never dead-letter
  because of it (invariant 3).
* **configuration** — the settings are wrong: a login refused, no such database. Retrying
  cannot help; the operator must fix them.
* **data** — the database refused the values themselves (a text it cannot store, a value out
  of range, a broken constraint), or the driver could not even encode them. The same values
  fail again; a read-only session, a missing privilege or an outage are not this.
* **permanent** — anything else.

:func:`refusal_of` picks, among the permanent faults of a send, the broker's refusal of the record
itself (too large for its topic, a topic the producer may not write, an invalid topic or
record): no outage, the broker is answering, and the same record is refused again until an
operator changes the topic or the grants.

:func:`component_of` names the server a transient fault came from (``database``, ``kafka``),
for the outage it belongs to (observability/outages.py).
"""

from __future__ import annotations

import asyncio
from enum import StrEnum
from typing import Final

import asyncpg
from aiokafka.errors import (
    CorruptRecordException,
    InvalidTimestampError,
    InvalidTopicError,
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    PolicyViolationError,
    RecordListTooLargeError,
    RecordTooLargeError,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
)

from spectral.errors import ConfigurationError, SpectralError, TransientError


class Fault(StrEnum):
    TRANSIENT = "transient"
    CONFIGURATION = "configuration"
    DATA = "data"
    PERMANENT = "permanent"


class Component(StrEnum):
    """The servers a process waits for during an outage."""

    DATABASE = "database"
    KAFKA = "kafka"


DATABASE_LOCK: Final = "database_lock"
"""The retry label of a database statement that waited on a lock past ``lock_timeout``: a
transaction holds the rows or table (a frozen member, a maintenance rotation, a manual session),
apart from an unreachable database."""

LOCK_NOT_AVAILABLE: Final = "55P03"
"""SQLSTATE of a statement that waited on a lock past ``lock_timeout``."""

_TRANSIENT_SQLSTATES: Final = frozenset({"40001", "40P01", LOCK_NOT_AVAILABLE, "53300", "53400"})
"""Serialization failure, deadlock, lock timeout, too many connections, configuration limit."""
_IDLE_SESSION_ENDED: Final = "25P03"
"""A session ended for idling in a transaction: its work rolled back, retry it."""
_TRANSIENT_CLASSES: Final = ("08", "57", "53", "58")
"""Connection exception, operator intervention (shutdown), insufficient resources, system."""
_CONFIGURATION_SQLSTATES: Final = frozenset({"3D000"})
"""No such database."""
_CONFIGURATION_CLASSES: Final = ("28",)
"""Invalid authorization: a wrong password, no such role, pg_hba."""
_DATA_CLASSES: Final = ("22", "23")
"""Data exception, integrity constraint violation."""

_DRIVER_ERRORS: Final = (
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
)


def _sqlstate(exc: BaseException) -> str:
    if isinstance(exc, asyncpg.PostgresError):
        return getattr(exc, "sqlstate", None) or ""
    return ""


def classify(exc: BaseException) -> Fault:
    """What ``exc`` means (see the module docstring)."""
    if isinstance(exc, SpectralError):
        if isinstance(exc, TransientError):
            return Fault.TRANSIENT
        return Fault.CONFIGURATION if isinstance(exc, ConfigurationError) else Fault.PERMANENT
    if isinstance(exc, KafkaError):
        # The client's own word: a leader moving, a broker unreachable, a request unanswered.
        # A lost membership (CommitFailedError, IllegalStateError) is not retriable: the
        # engine handles it as a rebalance.
        retriable = isinstance(exc, KafkaTimeoutError | RequestTimedOutError) or bool(
            getattr(exc, "retriable", False)
        )
        return Fault.TRANSIENT if retriable else Fault.PERMANENT
    if isinstance(exc, UnicodeError) or (
        isinstance(exc, asyncpg.InterfaceError) and isinstance(exc, ValueError)
    ):
        # The driver could not encode an argument ("invalid input for query argument $1"):
        # asyncpg's client-side DataError is an InterfaceError, but no retry encodes it.
        return Fault.DATA
    if isinstance(exc, (OSError, ConnectionError, asyncio.TimeoutError, *_DRIVER_ERRORS)):
        return Fault.TRANSIENT
    return _by_sqlstate(_sqlstate(exc))


def _by_sqlstate(state: str) -> Fault:
    if state in _CONFIGURATION_SQLSTATES or state.startswith(_CONFIGURATION_CLASSES):
        return Fault.CONFIGURATION
    if (
        state in _TRANSIENT_SQLSTATES
        or state == _IDLE_SESSION_ENDED
        or state.startswith(_TRANSIENT_CLASSES)
    ):
        return Fault.TRANSIENT
    if state.startswith(_DATA_CLASSES):
        return Fault.DATA
    return Fault.PERMANENT


class Refusal(StrEnum):
    """Why Kafka refused a record for good (a bounded metric label)."""

    TOO_LARGE = "message_too_large"
    NOT_AUTHORIZED = "not_authorized"
    INVALID = "invalid"


_REFUSALS: Final[tuple[tuple[type[KafkaError], Refusal], ...]] = (
    (MessageSizeTooLargeError, Refusal.TOO_LARGE),
    (RecordTooLargeError, Refusal.TOO_LARGE),
    (RecordListTooLargeError, Refusal.TOO_LARGE),
    (TopicAuthorizationFailedError, Refusal.NOT_AUTHORIZED),
    (InvalidTopicError, Refusal.INVALID),
    (CorruptRecordException, Refusal.INVALID),
    (InvalidTimestampError, Refusal.INVALID),
    (PolicyViolationError, Refusal.INVALID),
)


def refusal_of(exc: BaseException) -> Refusal | None:
    """Why the broker refused this record for good, or None when ``exc`` is no such refusal
    (an outage, or any other failure of the client). An exception may carry its own
    (``refusal``: the confluent transport's)."""
    carried = getattr(exc, "refusal", None)
    if isinstance(carried, Refusal):
        return carried
    for kind, refusal in _REFUSALS:
        if isinstance(exc, kind):
            return refusal
    return None


def is_transient(exc: BaseException) -> bool:
    """A fault of the database or the broker, not of the data: wait it out."""
    return classify(exc) is Fault.TRANSIENT


def is_configuration(exc: BaseException) -> bool:
    """The settings are wrong (a login refused, no such database): fix them."""
    return classify(exc) is Fault.CONFIGURATION


def is_data_error(exc: BaseException) -> bool:
    """The database refused the values themselves, or the driver could not encode them."""
    return classify(exc) is Fault.DATA


def component_of(exc: BaseException, default: str | None = None) -> str | None:
    """The server a fault came from: ``kafka``, ``database`` (``database_lock`` for a lock wait
    past ``lock_timeout``), found on the exception or along its causes; else ``default``."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        named = getattr(current, "component", None)
        if isinstance(named, str):
            return named
        if isinstance(current, KafkaError):
            return Component.KAFKA
        if _sqlstate(current) == LOCK_NOT_AVAILABLE:
            return DATABASE_LOCK
        if isinstance(current, (asyncpg.PostgresError, *_DRIVER_ERRORS)):
            return Component.DATABASE
        current = current.__cause__ or current.__context__
    return default


def describe(exc: BaseException, limit: int = 300) -> str:
    """``Type: message``, cut to ``limit`` characters: the error field of a log line."""
    return f"{type(exc).__name__}: {exc}"[:limit]
