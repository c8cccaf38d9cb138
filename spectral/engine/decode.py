"""The decode step: one fetched Kafka record -> a :class:`Delivery`, or a dead letter saying why
not. Every check a record must pass before it reaches a transaction belongs in
:meth:`RecordDecoder.decode`; nothing here touches the database or the broker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contracts import DecodeError, EventRegistry, RefusalReason
from spectral.engine.handler import Delivery
from spectral.kafka.dlq import DeadLetter


class RecordDecoder:
    """Decodes the records of a consumer's topics (``topics``: topic -> its event type) with
    the event types of ``events`` (spectral's and the installed plugins'); ``views``: the
    handler reads the types' views (:attr:`~spectral.engine.handler.Handler.reads_views`)."""

    def __init__(
        self,
        consumer: str,
        topics: Mapping[str, str],
        events: EventRegistry,
        *,
        views: bool = False,
    ) -> None:
        self._consumer = consumer
        self._topics = topics
        self._views = views
        self._read_record = events.read_record
        self._decode_record = events.decode_record
        self._decode = events.decode

    def decode(self, record: Any) -> Delivery | DeadLetter:
        """One record: its delivery, or its dead letter (the decode reason and detail)."""
        value: bytes | None = record.value
        expected = self._topics.get(record.topic)
        try:
            if self._views:
                payload, key, event_id, event_type, envelope = self._read_record(
                    value, record.key, expected
                )
            else:
                envelope = self._decode_record(value, record.key)
                payload, key, event_id = (
                    envelope.payload,
                    envelope.idempotency_key,
                    envelope.event_id,
                )
                event_type = envelope.event_type
        except DecodeError as exc:
            return self._dead(record, exc.reason, exc.detail)
        except Exception as exc:  # noqa: BLE001 - no record's bytes may stop the partition
            detail = f"{type(exc).__name__}: {exc}"[:1000]
            return self._dead(record, RefusalReason.DECODE_ERROR, detail)
        if event_type != expected:
            return self._dead(
                record,
                RefusalReason.UNEXPECTED_EVENT_TYPE,
                f"{event_type!r} on the topic of {expected!r}",
            )
        return Delivery(
            payload,
            key,
            event_id,
            record.topic,
            record.partition,
            record.offset,
            record.key,
            value,  # type: ignore[arg-type]  # decoded: not None
            record.timestamp or 0,
            tuple(record.headers or ()),
            envelope if envelope is not None else self._decode,
        )

    def decode_all(self, records: Sequence[Any]) -> tuple[list[Delivery], list[DeadLetter]]:
        deliveries: list[Delivery] = []
        dead: list[DeadLetter] = []
        for record in records:
            decoded = self.decode(record)
            if type(decoded) is Delivery:
                deliveries.append(decoded)
            else:
                dead.append(decoded)  # type: ignore[arg-type]
        return deliveries, dead

    def _dead(self, record: Any, reason: RefusalReason, detail: str) -> DeadLetter:
        return DeadLetter.of(record, consumer=self._consumer, reason=reason, detail=detail)
