"""Why a record could not be decoded: one error type with a machine-readable reason.

Consumers route dead letters on :attr:`DecodeError.reason` (a bounded set, safe as a metric
label) and keep :attr:`DecodeError.detail` (human text) for people.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

from contracts.fields import TIMESTAMP_ERROR, timestamp_refusal

if TYPE_CHECKING:
    from pydantic import ValidationError
    from pydantic_core import ErrorDetails


class DecodeReason(StrEnum):
    """The fixed set of reasons a record is rejected; the values are the wire/DLQ spelling."""

    NOT_JSON = "not_json"
    """Not UTF-8 JSON text (syntax error, invalid UTF-8, lone surrogate escape, NaN, BOM)."""
    NOT_AN_OBJECT = "not_an_object"
    """Valid JSON, but the top level is not an object."""
    UNKNOWN_EVENT_TYPE = "unknown_event_type"
    """``event_type`` names no registered payload (or not the one the caller expected)."""
    INVALID_ENVELOPE = "invalid_envelope"
    """An envelope field is missing or breaks its rule (``event_type`` missing counts here), or
    a string outside the payload holds U+0000."""
    INVALID_PAYLOAD = "invalid_payload"
    """The payload breaks its model: a type, a bound, (hashed payloads) a non-integer number or
    nesting deeper than 64 levels, or a string in it holds U+0000."""
    HASH_MISMATCH = "hash_mismatch"
    """``payload.snapshot_hash`` is not the hash of the payload as it is on the wire."""
    KEY_MISMATCH = "key_mismatch"
    """``idempotency_key`` is not the key the event type derives from its payload."""
    TOO_LARGE = "too_large"
    """The record is over the size limit (checked before parsing)."""
    RECORD_KEY_MISMATCH = "record_key_mismatch"
    """The Kafka record key is missing, empty or not the key the event type derives from its
    payload (its events would leave their entity's partition and order)."""


class DecodeError(ValueError):
    """A record that cannot be accepted; ``reason`` says why, ``detail`` says where."""

    def __init__(self, reason: DecodeReason, detail: str, *, event_type: str | None = None) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail
        self.event_type = event_type

    def __reduce__(self) -> tuple[object, ...]:
        # keep the error picklable (multiprocessing, logging handlers) despite keyword arguments
        return (_rebuild, (self.reason, self.detail, self.event_type))


def _rebuild(reason: DecodeReason, detail: str, event_type: str | None) -> DecodeError:
    return DecodeError(reason, detail, event_type=event_type)


def describe_validation_errors(exc: ValidationError, root: str = "") -> list[str]:
    """One ``location: message`` line per pydantic error, the location read as JSON paths
    (``payload.evidence_bundle[0].summary``) under ``root``."""
    return [f"{location(error['loc'], root)}: {error['msg']}" for error in validation_errors(exc)]


def validation_errors(exc: ValidationError) -> list[ErrorDetails]:
    """The errors of ``exc``; a refused timestamp's message says exactly why (its field reports
    one error type whatever the reason, see :data:`contracts.fields.TIMESTAMP_ERROR`)."""
    errors = exc.errors(include_url=False, include_context=False)
    for error in errors:
        if error["type"] == TIMESTAMP_ERROR:
            error["msg"] = timestamp_refusal(error["input"])
    return errors


def location(loc: tuple[int | str, ...], root: str = "") -> str:
    """A pydantic error location as a JSON path."""
    out = root
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(envelope)"
