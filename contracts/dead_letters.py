"""What a refused record becomes: the reasons a reader refuses with, in the order it checks them,
and the ``dlq.*`` headers of a dead letter (pure data, no I/O).

The spec's reasons and dead-letter tables (``schemas/events/README.md``) and the AsyncAPI
document's ``DeadLetter`` message are generated from these definitions, so the two documents
cannot disagree; tests hold them equal to what the decoder and the consumer engine do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from contracts.errors import RefusalReason


@dataclass(frozen=True, slots=True)
class Refusal:
    """One step of reading a record: the reason a record failing it is refused with, and when
    (Markdown, as the spec's table and the AsyncAPI descriptions show it)."""

    reason: RefusalReason
    when: str


REFUSALS: Final = (
    Refusal(RefusalReason.TOO_LARGE, "the value is over 1 MiB (checked before parsing)"),
    Refusal(
        RefusalReason.NOT_JSON,
        "not UTF-8 I-JSON text: syntax, encoding, byte order mark, lone surrogate escape, "
        "`NaN`/`Infinity`, a number overflowing a double, a raw control character in a string, "
        "trailing content, nesting deeper than 1,024 levels; or no text at all: an empty value, "
        "or none (a tombstone: the topics are not compacted, so a null value carries no event)",
    ),
    Refusal(RefusalReason.NOT_AN_OBJECT, "the top level is not an object"),
    Refusal(RefusalReason.INVALID_ENVELOPE, "`event_type` is missing or not a string"),
    Refusal(
        RefusalReason.UNKNOWN_EVENT_TYPE,
        "no payload model for `event_type` (whatever the other envelope fields hold: they are "
        "checked once the type is known)",
    ),
    Refusal(
        RefusalReason.INVALID_ENVELOPE,
        "an envelope field breaks its rule (section 1): missing, of the wrong type or spelling; "
        "`payload` missing or not an object (`null`, an array, a string, a number); a string "
        "outside the payload holding U+0000. An envelope error wins over a payload error",
    ),
    Refusal(
        RefusalReason.INVALID_PAYLOAD,
        "a member of the payload object breaks its rule (type, bound, spelling, first > last), "
        "a string in it holds U+0000, or (failure clusters) a number is not an integer in range "
        "or the payload nests deeper than 64 levels",
    ),
    Refusal(
        RefusalReason.HASH_MISMATCH,
        "failure clusters: `snapshot_hash` is not the hash of the payload as written",
    ),
    Refusal(RefusalReason.KEY_MISMATCH, "`idempotency_key` is not the key of section 3"),
    Refusal(
        RefusalReason.RECORD_KEY_MISMATCH,
        "the Kafka record key is null, empty or not the UTF-8 bytes of the key of section 3 "
        "(bytes that are not UTF-8 included)",
    ),
    Refusal(
        RefusalReason.UNEXPECTED_EVENT_TYPE,
        "a valid record on the topic of another event type",
    ),
    Refusal(
        RefusalReason.DECODE_ERROR,
        "the reader itself failed on the record in a way none of the reasons above names (a "
        "defect of the reader, kept from stopping the partition; the detail names the error)",
    ),
    Refusal(
        RefusalReason.HANDLER_REJECTED,
        "the consumer's projection refuses a valid record for a data reason of its own (none "
        "of spectral's consumers does today)",
    ),
    Refusal(
        RefusalReason.HANDLER_ERROR,
        "the projection failed on this record alone (it failed again when applied on its own "
        "transaction, after its batch failed)",
    ),
)
"""Every reason a record is refused with, in the order a reader checks (the first failing step
is the reason). ``invalid_envelope`` is two steps: before and after the type is looked up."""

DEAD_LETTER_REASONS: Final = frozenset(refusal.reason for refusal in REFUSALS)
"""Every ``dlq.reason`` a consumer writes (every :class:`RefusalReason`; a test holds it)."""

DLQ_SUFFIX: Final = ".dlq"
"""The dead letters of topic ``T`` go to ``T.dlq``: the one spelling of the suffix."""


@dataclass(frozen=True, slots=True)
class DeadLetterHeader:
    """A header a dead letter carries besides the original record's."""

    name: str
    meaning: str


DEAD_LETTER_HEADERS: Final = (
    DeadLetterHeader("dlq.reason", "why the record was refused: one of the refusal reasons"),
    DeadLetterHeader("dlq.detail", "human-readable detail, at most 1,000 characters"),
    DeadLetterHeader("dlq.source.topic", "the topic the record was consumed from"),
    DeadLetterHeader("dlq.source.partition", "its partition (decimal)"),
    DeadLetterHeader("dlq.source.offset", "its offset (decimal)"),
    DeadLetterHeader("dlq.consumer", "the consumer deployment that refused it"),
    DeadLetterHeader("dlq.failed_at", "when it was refused (RFC 3339, UTC)"),
    DeadLetterHeader(
        "dlq.history",
        "JSON array (UTF-8) of the record's earlier failures, oldest first, each "
        '`{"reason", "detail", "consumer", "failed_at", "source"}` (`source` is '
        "`topic:partition:offset`); `[]` for a first failure. Bounded to 20 items",
    ),
)
"""Every header of a dead letter, each always written: the record's own headers follow, minus
any ``dlq.*`` header it carried."""


REDRIVE_HEADERS: Final = (
    DeadLetterHeader(
        "dlq.history",
        "every failure of the record so far (as on its dead letter, plus that one)",
    ),
    DeadLetterHeader(
        "dlq.redriven_from", "where the dead letter was: `{topic}.dlq:{partition}:{offset}`"
    ),
)
"""The headers a redriven record (``spectral dlq redrive``) carries on its event topic besides
its original ones: informational, like every header (readers use the envelope)."""


__all__ = [
    "DEAD_LETTER_HEADERS",
    "DEAD_LETTER_REASONS",
    "DLQ_SUFFIX",
    "REDRIVE_HEADERS",
    "REFUSALS",
    "DeadLetterHeader",
    "Refusal",
]
