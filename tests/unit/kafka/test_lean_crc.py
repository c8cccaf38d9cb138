"""The lean record path's CRC check (spectral/kafka/aiokafka_records.py): each fetched v2 batch's
CRC-32C is computed in hardware over its bytes, and a batch whose bytes were changed is refused
exactly where aiokafka's own check refuses it — after the records of the batches before it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.consumer import fetcher as _fetcher
from aiokafka.errors import CorruptRecordException
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.structs import TopicPartition
from hypothesis import given
from hypothesis import strategies as st

from spectral.kafka import aiokafka_records
from spectral.kafka.aiokafka_records import KeptRecords, LeanRecord

_TP = TopicPartition("t", 0)
_BATCHES = 3
_PER_BATCH = 4


def _batch(base_offset: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for delta in range(_PER_BATCH):
        offset = base_offset + delta
        builder.append(delta, timestamp=None, key=b"k%d" % offset, value=b"v" * 50, headers=[])
    built = bytes(builder.build())
    return base_offset.to_bytes(8, "big") + built[8:]  # the base offset, as a broker sets it


_PARTS = [_batch(n * _PER_BATCH) for n in range(_BATCHES)]
_FETCHED = b"".join(_PARTS)


def _read(records: Any) -> tuple[list[LeanRecord], bool]:
    """The records the lean path hands over from ``records`` (a record set), and whether it
    refused a batch after them."""
    partition = SimpleNamespace(
        _records=records,
        _isolation_level=_fetcher.READ_UNCOMMITTED,
        _check_crcs=True,
        next_fetch_offset=0,
    )
    read: list[LeanRecord] = []
    try:
        read.extend(aiokafka_records._records(partition, _TP))
    except CorruptRecordException:
        return read, True
    return read, False


def test_the_crc_is_computed_in_hardware_here() -> None:
    # the installed google-crc32c has its compiled form: a fallback would be slow, not wrong
    assert aiokafka_records._crc32c is not None


def test_intact_batches_are_read_whole_and_a_partial_batch_at_the_end_is_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    computed: list[int] = []
    crc32c = aiokafka_records._crc32c
    assert crc32c is not None

    def counted(data: bytes) -> int:
        computed.append(len(data))
        return int(crc32c(data))

    monkeypatch.setattr(aiokafka_records, "_crc32c", counted)
    read, refused = _read(KeptRecords(_FETCHED + _PARTS[0][: len(_PARTS[0]) // 2]))
    assert not refused
    assert [r.offset for r in read] == list(range(_BATCHES * _PER_BATCH))
    # each whole batch's CRC was taken here, over the batch from its attributes on
    assert computed == [len(part) - 21 for part in _PARTS]


@given(st.integers(0, len(_FETCHED) - 1), st.integers(1, 255))
def test_a_changed_byte_is_refused_where_aiokafka_refuses_it(at: int, flip: int) -> None:
    changed = bytearray(_FETCHED)
    changed[at] ^= flip
    data = bytes(changed)
    try:
        expected = _read(MemoryRecords(data))  # aiokafka's own check on every batch
    except Exception as exc:  # noqa: BLE001 - a broken header: both must fail alike
        with pytest.raises(type(exc)):
            _read(KeptRecords(data))
        return
    assert _read(KeptRecords(data)) == expected


def test_the_lean_path_builds_record_sets_that_keep_their_bytes() -> None:
    # what lean() installs in aiokafka's fetcher module (at most once, over aiokafka's own)
    kept = KeptRecords(_FETCHED)
    assert kept.data is _FETCHED
    assert kept.size_in_bytes() == len(_FETCHED)


def test_a_changed_value_is_refused_after_the_records_of_the_batches_before_it() -> None:
    changed = bytearray(_FETCHED)
    changed[len(_PARTS[0]) + len(_PARTS[1]) - 3] ^= 1  # a byte of the second batch's last value
    read, refused = _read(KeptRecords(bytes(changed)))
    assert refused
    assert [r.offset for r in read] == list(range(_PER_BATCH))
