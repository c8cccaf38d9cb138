"""A leaner record path for one ``AIOKafkaConsumer``: ``getmany`` hands over light records.

aiokafka turns every fetched record into a ``ConsumerRecord`` through a chain of Python frames:
the partition's ``__next__``, its generator, ``_consumer_record`` (sizes, deserializers, a
tuple of the headers) and the dataclass's ``__init__`` — about half of the client's CPU per
record on the consumer's stream. :func:`lean` replaces, on one consumer's fetcher (not on the
class: every other client in the process keeps aiokafka's own path), the step that drains a
partition's fetched records: its records are read from the same record batches, skipped and
filtered by exactly the same rules (CRC check, transactions aborted under ``read_committed``,
control batches, records before the fetch position), and each becomes a :class:`LeanRecord`,
built in C; the fetch position moves as aiokafka moves it (after a batch, and to one past the
last record handed over). Nothing else of the client changes: fetching, positions, seeks,
commits and rebalances are aiokafka's own.

The CRC-32C of each record batch is computed in hardware (google-crc32c) over the batch's bytes
in the fetched data, about a sixth of aiokafka's own table-driven CRC (which was ~0.55 us of a
~1 KB record); aiokafka keeps no reference to the fetched bytes it can be asked for, so
:func:`lean` has the fetcher module build its record sets through :class:`KeptRecords`, which
keeps them (every consumer in the process reads the same record sets through it). A batch whose
bytes cannot be told (a record set made before, a legacy batch) or whose CRC does not match is
judged by aiokafka's own check, which alone may refuse it.

It applies to the aiokafka versions it was written against (0.14: the fetcher's
``fetched_records`` and the partition records' attributes it reads); with any other version
:func:`lean` leaves the consumer as it is.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from itertools import islice
from types import MethodType
from typing import Any, Final

import aiokafka
import google_crc32c
import msgspec
from aiokafka import AIOKafkaConsumer
from aiokafka.consumer import fetcher as _fetcher
from aiokafka.errors import CorruptRecordException
from aiokafka.record.memory_records import MemoryRecords

_VERSIONS: Final = ("0.14.",)
"""aiokafka versions whose fetcher internals this module reads."""


class LeanRecord(msgspec.Struct, frozen=True, gc=False):
    """A fetched record: what the consumer engine reads of aiokafka's ``ConsumerRecord``
    (:class:`spectral.kafka.transport.Record`), plus its timestamp type."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


class KeptRecords:
    """aiokafka's ``MemoryRecords`` over a fetched partition's bytes, keeping the bytes
    (``data``) for :func:`_records`' CRC check; its methods are the record set's own (bound C
    methods: no Python frame between aiokafka and them)."""

    __slots__ = ("data", "has_next", "next_batch", "size_in_bytes")

    def __init__(self, data: bytes) -> None:
        records = MemoryRecords(data)
        self.data = data
        self.has_next = records.has_next
        self.next_batch = records.next_batch
        self.size_in_bytes = records.size_in_bytes


_crc32c: Final = google_crc32c.value if google_crc32c.implementation == "c" else None
"""The CRC-32C of bytes in hardware (None where google-crc32c has no compiled form: aiokafka's
own check is then as fast)."""
_LOG_OVERHEAD: Final = 12
"""A batch's base offset and length, before the length counts."""
_CRC_FROM: Final = 21
"""A v2 batch's CRC covers it from its attributes, after its CRC (bytes 17 to 20), on."""
_V2: Final = 2
"""The magic of the v2 batch format (the only one with a CRC-32C over the whole batch)."""


def applies() -> bool:
    """True when the installed aiokafka is a version :func:`lean` was written for."""
    version: str = aiokafka.__version__
    return version.startswith(_VERSIONS)


def lean(consumer: AIOKafkaConsumer) -> bool:
    """Make a started ``consumer``'s ``getmany`` hand over :class:`LeanRecord` objects; False
    (nothing changed) when the aiokafka version is not one this was written for, or the
    consumer has no fetcher (not started)."""
    fetcher = getattr(consumer, "_fetcher", None)
    if fetcher is None or not applies():
        return False
    if _fetcher.MemoryRecords is MemoryRecords:  # once per process, and only over aiokafka's
        _fetcher.MemoryRecords = KeptRecords
    fetcher.fetched_records = MethodType(_fetched_records, fetcher)
    return True


async def _fetched_records(
    self: Any,
    partitions: Any,
    timeout: float = 0,  # noqa: ASYNC109 - aiokafka's own signature, which getmany calls
    max_records: int | None = None,
) -> dict[Any, list[LeanRecord]]:
    """aiokafka's ``Fetcher.fetched_records`` (0.14), draining each partition's records with
    :func:`_drain` instead of ``FetchResult.getall``."""
    while True:
        if self._subscriptions.reassignment_in_progress:
            await self._subscriptions.wait_for_assignment()
        start_time = time.monotonic()
        drained = _drain_ready(self, partitions, max_records)
        if drained or not timeout:
            return drained
        waiter = self._create_fetch_waiter()
        done, pending = await asyncio.wait([waiter], timeout=timeout)
        if not done or self._closed:
            if pending:
                pending.pop().cancel()
            return {}
        if waiter.done():
            waiter.result()  # raises what the fetch routine failed with (authorization)
        timeout = max(0, timeout - (time.monotonic() - start_time))


def _drain_ready(
    self: Any, partitions: Any, max_records: int | None
) -> dict[Any, list[LeanRecord]]:
    """One pass of ``fetched_records`` over the partitions with fetched results: their records
    (at most ``max_records`` in all), or the first partition's fetch error raised when no
    records came before it."""
    drained: dict[Any, list[LeanRecord]] = {}
    for tp in list(self._records.keys()):
        if partitions and tp not in partitions:
            if not self._subscriptions.is_assigned(tp):
                del self._records[tp]  # a result of a partition no longer assigned
            continue
        res_or_error = self._records[tp]
        if type(res_or_error) is not _fetcher.FetchResult:
            if drained:
                return drained  # the error is raised by the next call
            del self._records[tp]
            self._notify(self._wait_consume_future)
            res_or_error.check_raise()  # a FetchError: always raises
            continue
        records = _drain(res_or_error, max_records)
        if not res_or_error.has_more():
            del self._records[tp]  # all of it handed over: fetch the partition again
            self._notify(self._wait_consume_future)
        if not records:
            continue
        drained[tp] = records
        if max_records is not None:
            max_records -= len(records)
            if max_records == 0:
                break
    return drained


def _drain(result: Any, max_records: int | None) -> list[LeanRecord]:
    """``FetchResult.getall``: up to ``max_records`` of the partition's records (all when
    None), the fetch position moved past them."""
    if not result.check_assignment(result._topic_partition) or not result.has_more():  # noqa: SLF001
        return []
    partition_records = result._partition_records  # noqa: SLF001
    # Kept on the result, not on the partition's records: the generator refers to those, and a
    # reference back from them would be a cycle, which only the garbage collector (tuned to run
    # seldom in a consumer) would free, with the fetched buffers it holds.
    records = result.__dict__.get("_lean")
    if records is None:
        records = result._lean = _records(partition_records, result._topic_partition)  # noqa: SLF001
        # aiokafka's own generator over them is never used now; unstarted, it holds the
        # partition's records and they hold it: dropped here, no cycle is left behind.
        partition_records._records_iterator = None  # noqa: SLF001
    taken = list(records if max_records is None else islice(records, max_records))
    if max_records is not None and len(taken) >= max_records:
        # Stopped inside the records (perhaps at their end: the next call finds none left).
        partition_records.next_fetch_offset = max(
            partition_records.next_fetch_offset, taken[-1].offset + 1
        )
        result._update_position()  # noqa: SLF001
    else:
        result._update_position()  # noqa: SLF001
        result._partition_records = None  # noqa: SLF001
        result._lean = None  # noqa: SLF001
    return taken


def _records(partition_records: Any, tp: Any) -> Iterator[LeanRecord]:
    """aiokafka's ``PartitionRecords._unpack_records`` (0.14), each record a
    :class:`LeanRecord`. The fetch position moves at the end of each batch (and in
    :func:`_drain`, when it stops inside one); within a batch, records before the position at
    the batch's start are skipped, as aiokafka skips those before its per-record position
    (offsets grow within a batch, so the two agree)."""
    topic, partition = tp.topic, tp.partition
    batches = partition_records._records  # noqa: SLF001
    read_committed = partition_records._isolation_level == _fetcher.READ_COMMITTED  # noqa: SLF001
    check_crcs = partition_records._check_crcs  # noqa: SLF001
    data: bytes | None = getattr(batches, "data", None)
    at = 0  # where the next batch starts in data
    while batches.has_next():
        batch = batches.next_batch()
        if check_crcs:
            at = _checked(batch, data, at, tp)
        if read_committed and batch.producer_id is not None:
            partition_records._consume_aborted_up_to(batch.base_offset)  # noqa: SLF001
            if batch.is_control_batch and partition_records._contains_abort_marker(batch):  # noqa: SLF001
                partition_records._aborted_producers.discard(batch.producer_id)  # noqa: SLF001
            if batch.is_transactional and batch.producer_id in partition_records._aborted_producers:  # noqa: SLF001
                partition_records.next_fetch_offset = batch.next_offset
                continue
        if batch.is_control_batch:
            partition_records.next_fetch_offset = batch.next_offset
            continue
        start = partition_records.next_fetch_offset
        yield from [
            LeanRecord(
                topic,
                partition,
                record.offset,
                record.timestamp,
                record.timestamp_type,
                record.key,
                record.value,
                record.headers,
            )
            for record in batch
            if record.offset >= start
        ]
        partition_records.next_fetch_offset = batch.next_offset


def _checked(batch: Any, data: bytes | None, start: int, tp: Any) -> int:
    """Where the batch after ``batch`` starts in ``data``, the fetched bytes (``start``: where
    ``batch`` does; 0 without them), once ``batch``'s CRC holds: a v2 batch's CRC-32C over its
    bytes in ``data``, in hardware, or else aiokafka's own check; CorruptRecordException when
    neither holds."""
    end = 0
    if data is not None:
        end = start + _LOG_OVERHEAD + int.from_bytes(data[start + 8 : start + _LOG_OVERHEAD], "big")
        if (
            _crc32c is not None
            and batch.magic == _V2
            and _crc32c(data[start + _CRC_FROM : end]) == batch.crc
        ):
            return end
    if not batch.validate_crc():
        raise CorruptRecordException(f"Invalid CRC - {tp}")
    return end
