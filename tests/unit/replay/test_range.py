from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from spectral.replay.range import (
    AtOffsets,
    AtTime,
    Beginning,
    Latest,
    PartitionOffset,
    PartitionRange,
    Watermarks,
    parse_offsets,
    parse_timestamp,
    resolve,
    start_of,
    stop_of,
)

A, B = "t.a", "t.b"
PARTITIONS = [(A, 0), (A, 1), (B, 0)]
MARKS = Watermarks(
    beginning={(A, 0): 0, (A, 1): 5, (B, 0): 0},
    end={(A, 0): 10, (A, 1): 20, (B, 0): 3},
    at_start_time={(A, 0): 4, (A, 1): None, (B, 0): 1},
    at_stop_time={(A, 0): 8, (A, 1): None, (B, 0): 2},
)


def test_offsets_parse_with_and_without_topic() -> None:
    assert parse_offsets("0:15, 1:0") == (
        PartitionOffset(None, 0, 15),
        PartitionOffset(None, 1, 0),
    )
    assert parse_offsets("t.a:2:7") == (PartitionOffset("t.a", 2, 7),)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no PARTITION"),
        ("0", "expected PARTITION:OFFSET"),
        ("a:b", "integers"),
        ("0:-1", "negative"),
        ("x:y:0:1", "expected"),
        (":0:1", "empty topic"),
        ("0:1,0:2", "named twice"),
    ],
)
def test_bad_offsets_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_offsets(text)


def test_timestamps_need_a_zone_and_come_back_in_utc() -> None:
    assert parse_timestamp("2026-03-01T12:00:00Z") == datetime(2026, 3, 1, 12, tzinfo=UTC)
    assert parse_timestamp("2026-03-01T13:30:00.5+01:30") == datetime(
        2026, 3, 1, 12, 0, 0, 500_000, tzinfo=UTC
    )
    assert parse_timestamp("2026-03-01T12:00:00z").tzinfo == UTC
    for bad in ("2026-03-01T12:00:00", "2026-03-01", "yesterday", ""):
        with pytest.raises(ValueError, match=r"RFC 3339|zone"):
            parse_timestamp(bad)


def test_exactly_one_start_and_at_most_one_stop() -> None:
    assert start_of(from_beginning=True) == Beginning()
    assert start_of(latest=True) == Latest()
    assert start_of(from_offset="0:1") == AtOffsets((PartitionOffset(None, 0, 1),))
    assert isinstance(start_of(from_timestamp="2026-03-01T12:00:00Z"), AtTime)
    with pytest.raises(ValueError, match="exactly one"):
        start_of()
    with pytest.raises(ValueError, match="exactly one"):
        start_of(from_beginning=True, from_offset="0:1")
    assert stop_of() is None
    assert stop_of(to_offset="0:3") == AtOffsets((PartitionOffset(None, 0, 3),))
    with pytest.raises(ValueError, match="at most one"):
        stop_of("0:1", "2026-03-01T12:00:00Z")


def test_from_the_beginning_to_the_captured_end() -> None:
    assert resolve(Beginning(), None, PARTITIONS, MARKS) == [
        PartitionRange(A, 0, 0, 10),
        PartitionRange(A, 1, 5, 20),
        PartitionRange(B, 0, 0, 3),
    ]


def test_offsets_cover_only_the_named_partitions_and_are_clamped() -> None:
    ranges = resolve(AtOffsets(parse_offsets("1:2,t.b:0:99")), None, PARTITIONS, MARKS)
    # 1:2 names partition 1 of every topic that has one; 2 is below the first offset (5).
    assert ranges == [PartitionRange(A, 1, 5, 20), PartitionRange(B, 0, 3, 3)]
    assert ranges[1].size == 0


def test_unknown_partitions_are_refused() -> None:
    with pytest.raises(ValueError, match="no partition 7"):
        resolve(AtOffsets(parse_offsets("7:0")), None, PARTITIONS, MARKS)
    with pytest.raises(ValueError, match="no partition 0 on topic 'nope'"):
        resolve(Beginning(), AtOffsets(parse_offsets("nope:0:1")), PARTITIONS, MARKS)


def test_end_offsets_are_exclusive_bounds_never_past_the_captured_end() -> None:
    ranges = resolve(Beginning(), AtOffsets(parse_offsets("0:4,1:500")), PARTITIONS, MARKS)
    assert ranges == [
        PartitionRange(A, 0, 0, 4),
        PartitionRange(A, 1, 5, 20),
        PartitionRange(B, 0, 0, 3),
    ]


def test_timestamps_use_the_offsets_the_broker_found() -> None:
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    ranges = resolve(AtTime(t0), AtTime(t0 + timedelta(hours=1)), PARTITIONS, MARKS)
    # (t.a, 1) has no record at or after either time: it starts at its end, nothing to replay.
    assert ranges == [
        PartitionRange(A, 0, 4, 8),
        PartitionRange(A, 1, 20, 20),
        PartitionRange(B, 0, 1, 2),
    ]
    with pytest.raises(ValueError, match="later than"):
        resolve(AtTime(t0), AtTime(t0), PARTITIONS, MARKS)


def test_a_stop_before_the_start_is_an_empty_range() -> None:
    ranges = resolve(
        AtOffsets(parse_offsets("0:6")), AtOffsets(parse_offsets("0:2")), PARTITIONS, MARKS
    )
    assert [r.size for r in ranges] == [0, 0]


def test_latest_is_the_end() -> None:
    assert [r.start for r in resolve(Latest(), None, PARTITIONS, MARKS)] == [10, 20, 3]


def test_other_zones_are_converted() -> None:
    tz = timezone(timedelta(hours=-5))
    assert parse_timestamp("2026-03-01T07:00:00-05:00") == datetime(2026, 3, 1, 7, tzinfo=tz)
