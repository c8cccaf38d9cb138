"""Dead-letter records as read from ``T.dlq``, with their headers decoded.

A dead letter's content is untrusted (it is whatever a producer wrote, plus our headers, which
anyone can imitate): every view here is total over it — undecodable values, hostile headers
and out-of-range timestamps are shown for what they are, never raised on.

Nothing here reads a whole topic into memory, whatever it holds (a dead letter may carry a
record of several MiB): a topic is read one partition at a time, in (partition, offset) order,
up to its end offsets as of the start. Listings and counts keep a bounded summary of each record
(never its value or original headers) and stop at a page's end or at a read limit, saying where
to go on from (:class:`DeadLetterPage`); a redrive reads whole records in batches bounded in
count and bytes (:func:`scan_dead_letters`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeAlias, TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from contracts import DecodeError
from spectral.errors import TransientError
from spectral.kafka.dlq import (
    DETAIL_LIMIT,
    REFERENCE_MARK,
    history_of,
    parse_headers,
    text,
)
from spectral.kafka.partitions import standalone_consumer, topic_partitions
from spectral.kafka.topics import DLQ_SUFFIX, dlq_topic, is_dlq
from spectral.plugins import installed_registry
from spectral.settings import Settings

READ_TIMEOUT_SECONDS = 60.0
T = TypeVar("T")


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
        return _summary(self).to_json(redriven=redriven)

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


Position: TypeAlias = tuple[int, int]
"""(partition, offset) of a dead letter on its topic."""

SCAN_BATCH_RECORDS = 500
SCAN_BATCH_BYTES = 16 * 1024 * 1024
"""A batch of dead letters read with their values holds at most this many bytes of values and
headers (one record larger than that comes alone)."""
LISTING_SCAN_RECORDS = 10_000
LISTING_SCAN_BYTES = 64 * 1024 * 1024
"""What one listing or summary reads at most (records, and bytes as they came over the wire):
past either it stops and says where to go on from."""
KEY_PREVIEW = 1024
"""Bytes of a key a listing keeps."""
_FETCH_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class DeadLetterSummary:
    """What a listing shows of a dead letter: its coordinates and ``dlq.*`` facts, bounded —
    never its value nor its original headers (a listing of large records stays small)."""

    topic: str
    partition: int
    offset: int
    reason: str
    detail: str
    consumer: str
    failed_at: str
    source: str
    source_topic: str
    failures: int
    """Failures of the record so far, this dead letter's own included."""
    key: str | None
    value_size: int
    is_reference: bool

    @property
    def position(self) -> Position:
        return (self.partition, self.offset)

    def to_json(self, *, redriven: bool) -> dict[str, Any]:
        return {
            "in": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "reason": self.reason,
            "detail": self.detail,
            "consumer": self.consumer,
            "failed_at": self.failed_at,
            "source": self.source,
            "earlier_failures": self.failures - 1,
            "redriven": redriven,
            "key": self.key,
            "bytes": self.value_size,
        }


@dataclass(frozen=True)
class DeadLetterPage:
    """A page of a listing: at most ``limit`` dead letters after ``after``, in (partition,
    offset) order."""

    summaries: list[DeadLetterSummary]
    total: int
    """Dead letters on the topic now (its end offsets minus its first offsets)."""
    scanned: int
    """Records read for this page (filtered ones included)."""
    next_after: Position | None
    """Where the next page starts (after this position); None: the topic was read to its end.
    Set when the page filled up, and when the listing stopped at its read limit before
    (``truncated``)."""
    truncated: bool
    """The read limit stopped the listing before the page filled: more may match."""
    exists: bool = True
    """The topic exists on the broker (a name that does not is a mistake to report, not an
    empty listing)."""


@dataclass(frozen=True)
class ReasonCounts:
    """A topic's dead letters counted by reason, over at most a listing's read limit."""

    total: int
    """Dead letters on the topic now (from its offsets)."""
    by_reason: Counter[str]
    """Over the records scanned (the oldest first)."""
    scanned: dict[Position, str]
    """The reason of each record scanned."""
    truncated: bool
    """The read limit stopped the count: ``by_reason`` covers the ``scanned`` oldest only."""
    firsts: dict[int, int]
    """Each partition's first offset now."""


def parse_position(text: str) -> Position:
    """``P:O`` as a position; ValueError when it is not one."""
    partition, sep, offset = text.partition(":")
    if not sep or not partition.isdigit() or not offset.isdigit():
        raise ValueError(f"not a position PARTITION:OFFSET: {text[:40]!r}")
    return (int(partition), int(offset))


def format_position(position: Position | None) -> str | None:
    """A position as ``P:O`` (the cursor of a listing's next page)."""
    return None if position is None else f"{position[0]}:{position[1]}"


def _size(record: Any) -> int:
    value = record.value or b""
    key = record.key or b""
    return len(value) + len(key) + sum(len(k) + len(v or b"") for k, v in record.headers or ())


def _summary(record: Any) -> DeadLetterSummary:
    """A dead letter's summary straight from a fetched record (the value is only measured)."""
    headers = tuple(record.headers or ())
    d = parse_headers(headers)
    value = record.value or b""
    cut = {k: v[:DETAIL_LIMIT] for k, v in d.items()}
    key = record.key
    return DeadLetterSummary(
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        reason=cut.get("dlq.reason", ""),
        detail=cut.get("dlq.detail", ""),
        consumer=cut.get("dlq.consumer", ""),
        failed_at=cut.get("dlq.failed_at", ""),
        source="{}:{}:{}".format(
            cut.get("dlq.source.topic", ""),
            cut.get("dlq.source.partition", ""),
            cut.get("dlq.source.offset", ""),
        ),
        source_topic=d.get("dlq.source.topic", ""),
        failures=len(history_of(headers)),
        key=None if key is None else key[:KEY_PREVIEW].decode("utf-8", "replace"),
        value_size=len(value),
        is_reference=not value and REFERENCE_MARK in d.get("dlq.detail", ""),
    )


class _Scan:
    """One pass over a dead-letter topic: each partition in turn, from its first offset (or
    after a position) up to its end as of the start, one partition assigned at a time — so what
    waits in the client is one partition's fetch (about 1 MiB), whatever the topic holds."""

    def __init__(self, settings: Settings, bootstrap: str, topic: str) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self.topic = topic
        self.firsts: dict[int, int] = {}
        self.ends: dict[int, int] = {}
        self.exists = True

    @property
    def total(self) -> int:
        return sum(self.ends[p] - self.firsts[p] for p in self.ends)

    async def records(self, *, after: Position | None = None) -> AsyncGenerator[Any, None]:
        """The records one by one, as aiokafka returns them (the caller keeps what it needs of
        each); a TransientError when a partition makes no progress for READ_TIMEOUT_SECONDS."""
        found = await topic_partitions(self.settings, self.bootstrap, [self.topic])
        partitions = [p for _, p in found]
        if not partitions:
            self.exists = False
            return
        options = {"max_partition_fetch_bytes": _FETCH_BYTES, "fetch_max_bytes": _FETCH_BYTES}
        async with standalone_consumer(self.settings, self.bootstrap, **options) as consumer:
            try:
                tps = [TopicPartition(self.topic, p) for p in partitions]
                firsts = await consumer.beginning_offsets(tps)
                ends = await consumer.end_offsets(tps)
                self.firsts = {tp.partition: firsts[tp] for tp in tps}
                self.ends = {tp.partition: ends[tp] for tp in tps}
                for tp in tps:
                    start = self.firsts[tp.partition]
                    if after is not None:
                        if tp.partition < after[0]:
                            continue
                        if tp.partition == after[0]:
                            start = max(start, after[1] + 1)
                    async for record in self._partition(consumer, tp, start):
                        yield record
            except KafkaError as exc:
                raise TransientError(f"Kafka unavailable: {exc}") from exc

    async def _partition(
        self, consumer: AIOKafkaConsumer, tp: TopicPartition, start: int
    ) -> AsyncGenerator[Any, None]:
        end = self.ends[tp.partition]
        if start >= end:
            return
        consumer.assign([tp])
        consumer.seek(tp, start)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READ_TIMEOUT_SECONDS
        while await consumer.position(tp) < end:
            if loop.time() > deadline:
                raise TransientError(f"could not read {self.topic} to its end")
            fetched = await consumer.getmany(tp, timeout_ms=200, max_records=SCAN_BATCH_RECORDS)
            for record in fetched.pop(tp, []):
                if record.offset >= end:
                    return
                yield record
                # Counted from here: the time the caller spent with the record (a redrive
                # waiting for its producer through a broker restart) is not the topic's.
                deadline = loop.time() + READ_TIMEOUT_SECONDS


async def _batched(
    records: AsyncGenerator[Any, None], convert: Callable[[Any], T]
) -> AsyncGenerator[list[T], None]:
    """``records`` converted, in batches of at most :data:`SCAN_BATCH_RECORDS` and (but for one
    larger record) :data:`SCAN_BATCH_BYTES` of records as read."""
    batch: list[T] = []
    size = 0
    async with contextlib.aclosing(records):
        async for record in records:
            record_size = _size(record)
            if batch and (
                len(batch) >= SCAN_BATCH_RECORDS or size + record_size > SCAN_BATCH_BYTES
            ):
                yield batch
                batch, size = [], 0
            batch.append(convert(record))
            size += record_size
    if batch:
        yield batch


def scan_dead_letters(
    settings: Settings, bootstrap: str, topic: str
) -> AsyncGenerator[list[DeadLetterRecord], None]:
    """Every dead letter of ``topic`` up to its end as of now, whole (values included), in
    (partition, offset) order, in batches bounded in count and bytes — for a redrive, which
    must read them all."""
    return _batched(_Scan(settings, bootstrap, topic).records(), _record)


def scan_summaries(
    settings: Settings, bootstrap: str, topic: str
) -> AsyncGenerator[list[DeadLetterSummary], None]:
    """The same as summaries (a redrive's dry run): nothing of a record is kept but its
    summary."""
    return _batched(_Scan(settings, bootstrap, topic).records(), _summary)


async def list_dead_letters(
    settings: Settings,
    bootstrap: str,
    topic: str,
    *,
    reason: str | None = None,
    limit: int = 100,
    after: Position | None = None,
    scan_records: int = LISTING_SCAN_RECORDS,
    scan_bytes: int = LISTING_SCAN_BYTES,
) -> DeadLetterPage:
    """At most ``limit`` dead letters (of ``reason``) after ``after``, as summaries: values and
    original headers are read from the broker but never kept, and the read stops at the page's
    end or at ``scan_records``/``scan_bytes`` (then ``truncated``), whichever comes first."""
    scan = _Scan(settings, bootstrap, topic)
    chosen: list[DeadLetterSummary] = []
    scanned = read = 0
    last: Position | None = None
    stopped = False
    records = scan.records(after=after)
    async with contextlib.aclosing(records):
        async for record in records:
            if len(chosen) >= limit or scanned >= scan_records or read >= scan_bytes:
                stopped = True
                break
            scanned += 1
            read += _size(record)
            last = (record.partition, record.offset)
            summary = _summary(record)
            if reason is None or summary.reason == reason:
                chosen.append(summary)
    return DeadLetterPage(
        chosen,
        scan.total,
        scanned,
        last if stopped else None,
        truncated=stopped and len(chosen) < limit,
        exists=scan.exists,
    )


async def count_reasons(
    settings: Settings,
    bootstrap: str,
    topic: str,
    *,
    scan_records: int = LISTING_SCAN_RECORDS,
    scan_bytes: int = LISTING_SCAN_BYTES,
) -> ReasonCounts:
    """The dead letters of ``topic`` counted by reason, the oldest ``scan_records`` (and
    ``scan_bytes``) at most."""
    scan = _Scan(settings, bootstrap, topic)
    counts: Counter[str] = Counter()
    scanned: dict[Position, str] = {}
    read = 0
    truncated = False
    records = scan.records()
    async with contextlib.aclosing(records):
        async for record in records:
            if len(scanned) >= scan_records or read >= scan_bytes:
                truncated = True
                break
            read += _size(record)
            reason = parse_headers(record.headers or ()).get("dlq.reason", "")[:DETAIL_LIMIT]
            scanned[(record.partition, record.offset)] = reason
            counts[reason] += 1
    return ReasonCounts(scan.total, counts, scanned, truncated, dict(scan.firsts))


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
