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
    """Unique per publication (a republished duplicate keeps it; a new snapshot gets a new one)."""
    event_type: NonEmptyStr
    """Selects the payload model, e.g. ``platform.failure_cluster.detected``; also the topic."""
    schema_version: PositiveInt
    """Version of the payload schema the producer wrote."""
    source: NonEmptyStr
    """The producing context, e.g. ``platform``."""
    target: NonEmptyStr
    """The consuming context, e.g. ``platform``."""
    occurred_at: UtcDatetime
    """When the producer emitted the event."""
    idempotency_key: NonEmptyStr
    """What consumers deduplicate on; derived from the payload by the event type's rule."""
    correlation_id: Uuid | None = None
    """Optional tracing link shared by every event of one flow."""
    causation_id: Uuid | None = None
    """Optional tracing link to the event that caused this one."""
    payload: PayloadT
    """The typed payload."""
