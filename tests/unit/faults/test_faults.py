"""One classification of failures: what an outage is, what wrong settings are, what bad data
is — the same answer for the consumer engine, the relay, the executor and maintenance."""

from __future__ import annotations

import asyncpg
import pytest
from aiokafka.errors import (
    CommitFailedError,
    IllegalStateError,
    InvalidTopicError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    NodeNotReadyError,
    NotEnoughReplicasError,
    RecordTooLargeError,
    TopicAuthorizationFailedError,
)
from hypothesis import given
from hypothesis import strategies as st

from spectral.errors import ConfigurationError, PermanentError, TransientError
from spectral.faults import (
    DATABASE_LOCK,
    Component,
    Fault,
    Refusal,
    classify,
    component_of,
    is_configuration,
    is_data_error,
    is_transient,
    refusal_of,
)


def _postgres(sqlstate: str) -> asyncpg.PostgresError:
    """The error asyncpg raises for a server message with this SQLSTATE."""
    error: asyncpg.PostgresError = asyncpg.PostgresError.new({"C": sqlstate, "M": "x"})
    return error


@pytest.mark.parametrize(
    ("exc", "fault"),
    [
        (TransientError("away"), Fault.TRANSIENT),
        (ConfigurationError("fix it"), Fault.CONFIGURATION),
        (PermanentError("no"), Fault.PERMANENT),
        (ConnectionRefusedError(), Fault.TRANSIENT),
        (TimeoutError(), Fault.TRANSIENT),
        (asyncpg.exceptions.CannotConnectNowError("starting up"), Fault.TRANSIENT),
        (asyncpg.exceptions.AdminShutdownError("terminating"), Fault.TRANSIENT),
        (asyncpg.exceptions.LockNotAvailableError("lock timeout"), Fault.TRANSIENT),
        (asyncpg.exceptions.DeadlockDetectedError("deadlock"), Fault.TRANSIENT),
        (asyncpg.exceptions.TooManyConnectionsError("full"), Fault.TRANSIENT),
        (asyncpg.InterfaceError("connection closed"), Fault.TRANSIENT),
        (asyncpg.exceptions.InvalidPasswordError("wrong"), Fault.CONFIGURATION),
        (asyncpg.exceptions.InvalidCatalogNameError("no db"), Fault.CONFIGURATION),
        (asyncpg.exceptions.UntranslatableCharacterError("\\u0000"), Fault.DATA),
        (asyncpg.exceptions.ForeignKeyViolationError("fk"), Fault.DATA),
        (asyncpg.exceptions.NumericValueOutOfRangeError("big"), Fault.DATA),
        (asyncpg.exceptions.InsufficientPrivilegeError("no"), Fault.PERMANENT),
        (asyncpg.exceptions.ReadOnlySQLTransactionError("ro"), Fault.PERMANENT),
        (UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogate"), Fault.DATA),
        (KafkaConnectionError(), Fault.TRANSIENT),
        (NodeNotReadyError(), Fault.TRANSIENT),
        (KafkaTimeoutError(), Fault.TRANSIENT),
        (NotEnoughReplicasError(), Fault.TRANSIENT),
        (MessageSizeTooLargeError(), Fault.PERMANENT),
        (CommitFailedError(), Fault.PERMANENT),
        (IllegalStateError(), Fault.PERMANENT),
        (ValueError("a bug"), Fault.PERMANENT),
    ],
)
def test_what_a_failure_means(exc: BaseException, fault: Fault) -> None:
    assert classify(exc) is fault
    assert is_transient(exc) is (fault is Fault.TRANSIENT)
    assert is_configuration(exc) is (fault is Fault.CONFIGURATION)
    assert is_data_error(exc) is (fault is Fault.DATA)


def test_an_argument_the_driver_cannot_encode_is_bad_data_not_an_outage() -> None:
    """asyncpg's client-side DataError ("invalid input for query argument $1") is an
    InterfaceError, which otherwise means a lost connection: retrying it would never end."""
    error = asyncpg.exceptions._base.DataError("invalid input for query argument $1")
    assert classify(error) is Fault.DATA


@given(st.text(alphabet="0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=5, max_size=5))
def test_every_sqlstate_has_one_meaning(sqlstate: str) -> None:
    fault = classify(_postgres(sqlstate))
    if sqlstate.startswith(("08", "57", "53", "58")):
        assert fault is Fault.TRANSIENT
    elif sqlstate.startswith("28") or sqlstate == "3D000":
        assert fault is Fault.CONFIGURATION
    elif sqlstate.startswith(("22", "23")):
        assert fault is Fault.DATA
    elif sqlstate in {"40001", "40P01", "55P03", "25P03"}:
        assert fault is Fault.TRANSIENT
    else:
        assert fault is Fault.PERMANENT


def test_the_server_a_fault_came_from() -> None:
    assert component_of(KafkaConnectionError()) == Component.KAFKA
    assert component_of(asyncpg.exceptions.CannotConnectNowError("x")) == Component.DATABASE
    assert component_of(asyncpg.exceptions.LockNotAvailableError("x")) == DATABASE_LOCK
    translated = TransientError("fetch: database unavailable")
    translated.__cause__ = asyncpg.exceptions.AdminShutdownError("terminating")
    assert component_of(translated) == Component.DATABASE

    class BrokerError(TransientError):
        component = "kafka"

    assert component_of(BrokerError("no ack")) == "kafka"
    assert component_of(OSError("which one?"), default="database") == "database"
    assert component_of(KafkaError()) == Component.KAFKA
    assert component_of(ValueError()) is None


def _retriable_kafka_errors() -> list[type[KafkaError]]:
    import aiokafka.errors  # noqa: PLC0415

    return [
        kind
        for kind in vars(aiokafka.errors).values()
        if isinstance(kind, type)
        and issubclass(kind, KafkaError)
        and getattr(kind, "retriable", False)
    ]


@pytest.mark.parametrize(
    ("exc", "refusal"),
    [
        (MessageSizeTooLargeError(), Refusal.TOO_LARGE),
        (RecordTooLargeError(), Refusal.TOO_LARGE),
        (TopicAuthorizationFailedError(), Refusal.NOT_AUTHORIZED),
        (InvalidTopicError(), Refusal.INVALID),
        (KafkaTimeoutError(), None),
        (KafkaConnectionError(), None),
        (TransientError("away"), None),
        (ValueError("not kafka"), None),
    ],
)
def test_a_refusal_of_the_record_is_told_from_an_outage(
    exc: BaseException, refusal: Refusal | None
) -> None:
    assert refusal_of(exc) == refusal


@pytest.mark.parametrize("kind", _retriable_kafka_errors())
def test_no_error_the_client_retries_is_a_refusal(kind: type[KafkaError]) -> None:
    """What the Kafka client calls retriable is an outage (waited out), never a refusal."""
    exc = kind()
    assert refusal_of(exc) is None
    assert classify(exc) is Fault.TRANSIENT
