"""Why a record could not be decoded: one error type with a machine-readable reason.

Consumers route dead letters on :attr:`DecodeError.reason` (a bounded set, safe as a metric
label) and keep :attr:`DecodeError.detail` (human text) for people.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Final

from contracts.fields import TIMESTAMP_ERROR, timestamp_refusal

if TYPE_CHECKING:
    from pydantic import ValidationError
    from pydantic_core import ErrorDetails


class RefusalReason(StrEnum):
    """Every reason a record is refused with, the one set of dead-letter reasons: the decoder's,
    then the consumer's, spelled as the ``dlq.reason`` header spells them (a bounded set, safe as
    a metric label). The first ones are what :class:`DecodeError` carries; the consumer adds the
    last four. (A work item's dead-letter reasons are another thing: the work executor's.)"""

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
    UNEXPECTED_EVENT_TYPE = "unexpected_event_type"
    """A valid record on the topic of another event type."""
    DECODE_ERROR = "decode_error"
    """The reader itself failed on the record in a way no other reason names."""
    HANDLER_REJECTED = "handler_rejected"
    """The consumer's projection refused a valid record for a data reason of its own."""
    HANDLER_ERROR = "handler_error"
    """The projection failed on this record alone."""


DecodeReason = RefusalReason
"""The name the extension API has always given the reasons (``DecodeError.reason``)."""

CONSUMER_REASONS: Final = frozenset(
    {
        RefusalReason.UNEXPECTED_EVENT_TYPE,
        RefusalReason.DECODE_ERROR,
        RefusalReason.HANDLER_REJECTED,
        RefusalReason.HANDLER_ERROR,
    }
)
"""The reasons only a consumer refuses with; decoding refuses with the others."""


class DecodeError(ValueError):
    """A record that cannot be accepted; ``reason`` says why, ``detail`` says where."""

    def __init__(
        self, reason: RefusalReason, detail: str, *, event_type: str | None = None
    ) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail
        self.event_type = event_type

    def __reduce__(self) -> tuple[object, ...]:
        # keep the error picklable (multiprocessing, logging handlers) despite keyword arguments
        return (_rebuild, (self.reason, self.detail, self.event_type))


def _rebuild(reason: RefusalReason, detail: str, event_type: str | None) -> DecodeError:
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
