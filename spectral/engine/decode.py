"""The decode step: one fetched Kafka record -> a :class:`Delivery`, or a dead letter saying why
not. Every check a record must pass before it reaches a transaction belongs in
:meth:`RecordDecoder.decode`; nothing here touches the database or the broker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contracts import DecodeError, EventRegistry, RefusalReason
from contracts.registry import ViewReader
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
        self._fast: dict[str, ViewReader] = {}
        """Per topic, the fast path of its event type (views only): tried first, in
        :meth:`decode_all`; a record it does not accept takes :meth:`decode` without it."""
        if views:
            for topic, event_type in topics.items():
                reader = events.view_reader(event_type)
                if reader is not None:
                    self._fast[topic] = reader

    def decode(self, record: Any, *, fast: bool = True) -> Delivery | DeadLetter:
        """One record: its delivery, or its dead letter (the decode reason and detail).
        ``fast=False``: the fast path of the record's type was tried and did not accept it."""
        value: bytes | None = record.value
        expected = self._topics.get(record.topic)
        try:
            if self._views:
                payload, key, event_id, event_type, envelope = self._read_record(
                    value, record.key, expected, fast=fast
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
        """:meth:`decode` of each record, split into deliveries and dead letters.

        The fast path of a record's type (the form spectral writes, checked straight from its
        bytes) is called here, inline: the engine decodes every record it reads, and the frames
        and tuples between the loop and the fast path cost as much as a third of it. A record
        the fast path does not accept (it returned None, or anything raised) takes
        :meth:`decode` without the fast path: the full decode, which also words the refusal.
        """
        deliveries: list[Delivery] = []
        dead: list[DeadLetter] = []
        fast = self._fast
        envelope_of = self._decode
        topic: str | None = None
        read: ViewReader | None = None
        for record in records:
            value = record.value
            if record.topic is not topic:  # a batch's records share a few topic objects
                topic = record.topic
                read = fast.get(topic)
            if read is not None and value is not None:
                try:
                    found = read(value, record.key)
                except Exception:  # noqa: BLE001 - the full decode gives the verdict
                    found = None
                if found is not None:
                    view, idempotency_key, event_id = found
                    deliveries.append(
                        Delivery(
                            view,
                            idempotency_key,
                            event_id,
                            record.topic,
                            record.partition,
                            record.offset,
                            record.key,
                            value,
                            record.timestamp or 0,
                            tuple(headers) if (headers := record.headers) else (),
                            envelope_of,
                        )
                    )
                    continue
                decoded = self.decode(record, fast=False)
            else:
                decoded = self.decode(record)
            if type(decoded) is Delivery:
                deliveries.append(decoded)
            else:
                dead.append(decoded)  # type: ignore[arg-type]
        return deliveries, dead

    def _dead(self, record: Any, reason: RefusalReason, detail: str) -> DeadLetter:
        return DeadLetter.of(record, consumer=self._consumer, reason=reason, detail=detail)
