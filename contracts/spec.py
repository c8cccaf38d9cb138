"""What the registry knows about one event type, and how envelopes of it are built."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, cast
from uuid import UUID, uuid4

from contracts.envelope import EventEnvelope, PayloadT


@dataclass(frozen=True, slots=True)
class EventSpec(Generic[PayloadT]):
    """One registered event type: its payload model, version and key rules.

    ``idempotency_key`` and ``record_key`` derive the envelope's dedup key and the Kafka record
    key from the payload, so both are functions of the event itself (decode checks the first).
    ``verify_wire`` runs extra checks against the payload as it was on the wire (the raw parsed
    object) and raises :class:`contracts.DecodeError`; failure clusters verify their hash there.
    ``wire_idempotency_key`` and ``wire_record_key``, when given, return exactly what
    ``idempotency_key`` and ``record_key`` return, from the validated payload and the raw one
    (cheaper when the wire text already has the key's spelling); decode checks the envelope's
    key, and ``decode_record`` the record key, against them.
    ``hashed_payload`` says the payload is hashed as it is on the wire, so every number in it,
    unknown fields included, must be an integer in the I-JSON range (the JSON Schemas say so).

    ``read_view`` and ``view_of``, when given, offer the type's *view*: a light typed object
    handlers read instead of the pydantic payload (``EventRegistry.read_record``, the consumer
    engine's decode step). ``read_view(value, key)`` is the fast path, straight from a record's
    value bytes and key: ``(view, idempotency_key, event_id)`` of a record of this type that
    passes every check ``decode_record`` makes, or None to let the full decode decide (it never
    refuses: refusals and their wording stay the full decode's, and a record of another type
    is None too); ``view_of(envelope, raw_payload)`` builds the view of a record the full
    decode accepted.

    What the published documents say of the type (the spec's tables and the AsyncAPI document
    are generated from these, never written twice): ``idempotency_key_rule`` and
    ``record_key_rule`` spell the two key functions as templates over the payload's members as
    written (``"{cluster_id}:{snapshot_hash}"``; a test holds each template equal to its
    function), and ``open_to_producers`` says whether any producer may publish the type (false:
    only the service that owns it does, through its outbox).
    """

    event_type: str
    schema_version: int
    payload_model: type[PayloadT]
    idempotency_key: Callable[[PayloadT], str]
    record_key: Callable[[PayloadT], str]
    default_source: str
    default_target: str
    verify_wire: Callable[[Mapping[str, Any], PayloadT], None] | None = None
    wire_idempotency_key: Callable[[Mapping[str, Any], PayloadT], str] | None = None
    wire_record_key: Callable[[Mapping[str, Any], PayloadT], str] | None = None
    hashed_payload: bool = False
    idempotency_key_rule: str | None = None
    record_key_rule: str | None = None
    open_to_producers: bool = True
    read_view: Callable[[bytes, bytes | None], tuple[Any, str, str] | None] | None = None
    view_of: Callable[[EventEnvelope[PayloadT], Mapping[str, Any]], Any] | None = None
    envelope_model: type[EventEnvelope[PayloadT]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # EventEnvelope[Model] is built (and its validator compiled) once, here. mypy cannot
        # subscript a generic class with a runtime type, hence the ignore.
        model = EventEnvelope[self.payload_model]  # type: ignore[name-defined]
        parametrized = cast("type[EventEnvelope[PayloadT]]", model)
        object.__setattr__(self, "envelope_model", parametrized)

    def envelope(
        self,
        payload: PayloadT,
        *,
        event_id: UUID | None = None,
        occurred_at: datetime | None = None,
        correlation_id: UUID | None = None,
        causation_id: UUID | None = None,
        source: str | None = None,
        target: str | None = None,
    ) -> EventEnvelope[PayloadT]:
        """An envelope around ``payload`` with this type's version and derived idempotency key.

        ``event_id`` defaults to a new UUID4 and ``occurred_at`` to now (UTC).
        """
        return self.envelope_model(
            event_id=event_id if event_id is not None else uuid4(),
            event_type=self.event_type,
            schema_version=self.schema_version,
            source=source if source is not None else self.default_source,
            target=target if target is not None else self.default_target,
            occurred_at=occurred_at if occurred_at is not None else datetime.now(UTC),
            idempotency_key=self.idempotency_key(payload),
            correlation_id=correlation_id,
            causation_id=causation_id,
            payload=payload,
        )
