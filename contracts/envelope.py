"""The envelope every Kafka record value carries, generic over its payload.

Wire form (one UTF-8 JSON object per record value; field order is not significant)::

    {"event_id": "<uuid>", "event_type": "platform.failure_cluster.detected",
     "schema_version": 1, "source": "platform", "target": "platform",
     "occurred_at": "2026-11-21T10:00:00.123456Z", "idempotency_key": "<key>",
     "correlation_id": null, "causation_id": null, "payload": {...}}

``correlation_id`` and ``causation_id`` are always written (``null`` when absent) and may be
missing on input. Envelope fields this version does not know are tolerated and kept
(``extra="allow"``): they survive decode -> encode, so a newer producer's additions pass through
older relays and redrives unchanged. ``schema_version`` is not compared to the registered one:
payload versions are additive-only, so a newer version decodes (its new fields kept as extras)
and an older one decodes with defaults.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from contracts.fields import NonEmptyStr, PositiveInt, UtcDatetime, Uuid

PayloadT = TypeVar("PayloadT", bound=BaseModel)

ENVELOPE_FIELDS = (
    "event_id",
    "event_type",
    "schema_version",
    "source",
    "target",
    "occurred_at",
    "idempotency_key",
    "correlation_id",
    "causation_id",
    "payload",
)
"""The envelope fields of the wire contract, in the order they are written."""


class EventEnvelope(BaseModel, Generic[PayloadT]):
    """One event: routing and dedup metadata around a typed, immutable payload."""

    model_config = ConfigDict(frozen=True, extra="allow", use_attribute_docstrings=True)

    event_id: Uuid
    """Identifies one event: minted when the event is built, kept by every copy of its bytes (a
    client's retry, a relay's re-send after a crash, a replay, a redrive). So one `event_id` may
    arrive more than once, and two events may carry one `idempotency_key` with different ones:
    consumers never deduplicate on it."""
    event_type: NonEmptyStr
    """Selects the payload model; the topic is the event type (plus a deployment prefix)."""
    schema_version: PositiveInt
    """Version of the payload schema the producer wrote; informational for readers."""
    source: NonEmptyStr
    """The producing context, informational: readers check only that it is non-empty text
    (spectral writes `platform` for failure clusters, `work` for the work stream; another
    producer may name itself)."""
    target: NonEmptyStr
    """The consuming context, informational like `source` (spectral writes the same values)."""
    occurred_at: UtcDatetime
    """When the producer emitted the event."""
    idempotency_key: NonEmptyStr
    """What consumers deduplicate on; derived from the payload by the event type's key rule."""
    correlation_id: Uuid | None = None
    """Optional tracing link shared by every event of one flow; always written, may be absent
    on input."""
    causation_id: Uuid | None = None
    """Optional tracing link to the event that caused this one; always written, may be absent on
    input."""
    payload: PayloadT
    """The typed payload of `event_type`. A payload that is missing or not an object (`null`, an
    array, a string, a number) breaks the envelope (`invalid_envelope`); the rules of its
    members are the payload's (`invalid_payload`)."""
