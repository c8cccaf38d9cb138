"""Dead-letter records as read from ``T.dlq``, with their headers decoded.

A dead letter's content is untrusted (it is whatever a producer wrote, plus our headers, which
anyone can imitate): every view here is total over it — undecodable values, hostile headers
and out-of-range timestamps are shown for what they are, never raised on.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from contracts import DecodeError
from spectral.errors import TransientError
from spectral.kafka.dlq import REFERENCE_MARK, history_of, parse_headers, text
from spectral.kafka.partitions import standalone_consumer, topic_partitions
from spectral.kafka.topics import DLQ_SUFFIX, dlq_topic, is_dlq
from spectral.plugins import installed_registry
from spectral.settings import Settings

READ_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class Topics:
    """A source topic and its dead-letter topic, from either name."""

    source: str
    dlq: str

    @classmethod
    def of(cls, name: str) -> Topics:
        if is_dlq(name):
            return cls(name[: -len(DLQ_SUFFIX)], name)
        return cls(name, dlq_topic(name))


@dataclass(frozen=True)
class DeadLetterRecord:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes | None], ...]

    @property
    def position(self) -> tuple[int, int]:
        return (self.partition, self.offset)

    @property
    def dlq(self) -> dict[str, str]:
        return parse_headers(self.headers)

    @property
    def reason(self) -> str:
        return self.dlq.get("dlq.reason", "")

    @property
    def source(self) -> str:
        d = self.dlq
        return "{}:{}:{}".format(
            d.get("dlq.source.topic", ""),
            d.get("dlq.source.partition", ""),
            d.get("dlq.source.offset", ""),
        )

    @property
    def source_topic(self) -> str:
        return self.dlq.get("dlq.source.topic", "")

    @property
    def is_reference(self) -> bool:
        """The original bytes are not in the dead letter (too large to carry)."""
        return not self.value and REFERENCE_MARK in self.dlq.get("dlq.detail", "")

    def history(self) -> list[dict[str, Any]]:
        """Every failure of the record, oldest first; the last is this dead letter's own."""
        return history_of(self.headers)

    def decoded(self) -> tuple[dict[str, Any] | None, str | None]:
        """(the envelope as JSON, None) when the original decodes (with the event types of
        spectral and the installed plugins), else (None, why not)."""
        try:
            envelope = installed_registry().decode(self.value)
            view: dict[str, Any] = envelope.model_dump(mode="json")
        except DecodeError as exc:
            return None, f"{exc.reason.value}: {exc.detail}"
        except Exception as exc:  # noqa: BLE001 - whatever the bytes, show the dead letter
            return None, f"decode_error: {type(exc).__name__}: {exc}"[:1000]
        return view, None

    def summary_json(self, *, redriven: bool) -> dict[str, Any]:
        d = self.dlq
        return {
            "in": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "reason": self.reason,
            "detail": d.get("dlq.detail", ""),
            "consumer": d.get("dlq.consumer", ""),
            "failed_at": d.get("dlq.failed_at", ""),
            "source": self.source,
            "earlier_failures": len(self.history()) - 1,
            "redriven": redriven,
            "key": self.key.decode("utf-8", "replace") if self.key is not None else None,
            "bytes": len(self.value),
        }

    def full_json(self, *, redriven: bool) -> dict[str, Any]:
        envelope, problem = self.decoded()
        return {
            **self.summary_json(redriven=redriven),
            "topic": self.topic,
            "timestamp": timestamp(self.timestamp_ms),
            "headers": {k: text(v) for k, v in self.headers},
            "history": self.history(),
            "envelope": envelope,
            "undecodable": problem,
            "value_preview": None
            if envelope is not None
            else self.value[:500].decode("utf-8", "replace"),
        }


def timestamp(millis: int) -> str:
    """A record's timestamp as RFC 3339 (the raw number when it is no date)."""
    try:
        return datetime.fromtimestamp(millis / 1000, UTC).isoformat()
    except (OverflowError, OSError, ValueError):
        return str(millis)


async def read_dead_letters(
    settings: Settings, bootstrap: str, topic: str
) -> list[DeadLetterRecord]:
    """Every record of dead-letter topic ``topic`` up to its end as of now, in offset order per
    partition (no consumer group, nothing committed)."""
    partitions = await topic_partitions(settings, bootstrap, [topic])
    if not partitions:
        return []
    tps = [TopicPartition(t, p) for t, p in partitions]
    out: list[DeadLetterRecord] = []
    async with standalone_consumer(settings, bootstrap) as consumer:
        try:
            ends = await consumer.end_offsets(tps)
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + READ_TIMEOUT_SECONDS
            remaining = {tp for tp in tps if ends[tp] > 0}
            while remaining:
                for tp in list(remaining):
                    if await consumer.position(tp) >= ends[tp]:
                        remaining.discard(tp)
                if not remaining:
                    break
                if loop.time() > deadline:
                    raise TransientError(f"could not read {topic} to its end")
                fetched = await consumer.getmany(*remaining, timeout_ms=200)
                for tp, records in fetched.items():
                    out.extend(_record(r) for r in records if r.offset < ends[tp])
        except KafkaError as exc:
            raise TransientError(f"Kafka unavailable: {exc}") from exc
    out.sort(key=lambda r: (r.partition, r.offset))
    return out


async def read_dead_letter(
    settings: Settings, bootstrap: str, topic: str, partition: int, offset: int
) -> DeadLetterRecord | None:
    """The record at ``topic:partition:offset`` (None if there is none)."""
    tp = TopicPartition(topic, partition)
    if (topic, partition) not in await topic_partitions(settings, bootstrap, [topic]):
        return None
    async with standalone_consumer(settings, bootstrap) as consumer:
        try:
            first = (await consumer.beginning_offsets([tp]))[tp]
            end = (await consumer.end_offsets([tp]))[tp]
            if not first <= offset < end:
                return None
            consumer.assign([tp])
            consumer.seek(tp, offset)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + READ_TIMEOUT_SECONDS
            while loop.time() < deadline:
                fetched = await consumer.getmany(tp, timeout_ms=200, max_records=1)
                for record in fetched.get(tp, []):
                    return _record(record) if record.offset == offset else None
        except KafkaError as exc:
            raise TransientError(f"Kafka unavailable: {exc}") from exc
    return None


def _record(record: Any) -> DeadLetterRecord:
    return DeadLetterRecord(
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        timestamp_ms=record.timestamp or 0,
        key=record.key,
        value=record.value if record.value is not None else b"",
        headers=tuple(record.headers or ()),
    )
