"""Which offsets a replay or an offsets reset covers (pure: no I/O).

Options, as the CLI takes them:

* a start: ``--from-beginning`` | ``--from-offset [TOPIC:]P:O[,...]`` | ``--from-timestamp T``
  (an offsets reset takes the same choices plus "latest");
* an optional end: ``--to-offset [TOPIC:]P:O[,...]`` | ``--to-timestamp T``; without one, the
  end offsets captured when the replay starts (records published later are not replayed).

Offsets name a partition of every topic of the consumer that has it (``P:O``) or of one
topic (``TOPIC:P:O``); a start by offsets covers only the partitions it names. End offsets are
exclusive, like Kafka's end offsets: ``--to-offset 0:10`` replays partition 0 up to offset 9.
A timestamp start is the first record at or after it; a timestamp end stops before the first
record at or after it. Timestamps are RFC 3339 with a zone (``2026-03-01T12:00:00Z``).

``resolve`` turns a start, an end and the broker's facts (partitions, first and end offsets,
offsets found for the timestamps) into one :class:`PartitionRange` per partition.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeAlias

from spectral.kafka.partitions import TopicPartitionKey, Watermarks

__all__ = ["TopicPartitionKey", "Watermarks"]  # re-exported: the range is stated in their terms


@dataclass(frozen=True, slots=True)
class PartitionOffset:
    """One ``[TOPIC:]P:O`` item; ``topic`` None means every topic of the consumer."""

    topic: str | None
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class Beginning:
    """From the first offset still in the partition."""


@dataclass(frozen=True, slots=True)
class Latest:
    """The end offset (offsets reset only: skip everything published so far)."""


@dataclass(frozen=True, slots=True)
class AtOffsets:
    offsets: tuple[PartitionOffset, ...]


@dataclass(frozen=True, slots=True)
class AtTime:
    at: datetime

    @property
    def millis(self) -> int:
        return int(self.at.timestamp() * 1000)


Start: TypeAlias = Beginning | Latest | AtOffsets | AtTime
Stop: TypeAlias = AtOffsets | AtTime


@dataclass(frozen=True, slots=True)
class PartitionRange:
    """Offsets ``start`` (inclusive) to ``end`` (exclusive) of one partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def key(self) -> TopicPartitionKey:
        return (self.topic, self.partition)

    @property
    def size(self) -> int:
        """An upper bound of the records in the range (compaction and markers leave gaps)."""
        return max(self.end - self.start, 0)


# -- parsing ---------------------------------------------------------------------------------


def parse_offsets(text: str) -> tuple[PartitionOffset, ...]:
    """``"0:15,1:0"`` or ``"orders:0:15"``; raises ValueError saying what is wrong."""
    items: list[PartitionOffset] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        parts = item.split(":")
        if len(parts) not in (2, 3):
            raise ValueError(f"{item!r}: expected PARTITION:OFFSET or TOPIC:PARTITION:OFFSET")
        topic = parts[0] if len(parts) == 3 else None  # noqa: PLR2004 - TOPIC:P:O
        if topic == "":
            raise ValueError(f"{item!r}: empty topic name")
        try:
            partition, offset = int(parts[-2]), int(parts[-1])
        except ValueError:
            raise ValueError(f"{item!r}: partition and offset must be integers") from None
        if partition < 0 or offset < 0:
            raise ValueError(f"{item!r}: partition and offset must not be negative")
        items.append(PartitionOffset(topic, partition, offset))
    if not items:
        raise ValueError("no PARTITION:OFFSET given")
    seen: set[tuple[str | None, int]] = set()
    for parsed in items:
        if (parsed.topic, parsed.partition) in seen:
            raise ValueError(f"partition {parsed.partition} is named twice")
        seen.add((parsed.topic, parsed.partition))
    return tuple(items)


def parse_timestamp(text: str) -> datetime:
    """An RFC 3339 timestamp with a zone (``Z`` or ``+hh:mm``), as an aware UTC datetime."""
    value = text.strip()
    candidate = value[:-1] + "+00:00" if value[-1:] in ("Z", "z") else value
    try:
        parsed = datetime.fromisoformat(candidate)
    except ValueError:
        raise ValueError(f"{text!r} is not an RFC 3339 timestamp") from None
    if "T" not in value.upper() or parsed.tzinfo is None:
        raise ValueError(f"{text!r}: give a date, a time and a zone, e.g. 2026-03-01T12:00:00Z")
    return parsed.astimezone(UTC)


def start_of(
    *,
    from_beginning: bool = False,
    from_offset: str | None = None,
    from_timestamp: str | None = None,
    latest: bool = False,
) -> Start:
    """Exactly one start option, parsed."""
    chosen = [
        name
        for name, given in (
            ("beginning", from_beginning),
            ("offset", from_offset is not None),
            ("timestamp", from_timestamp is not None),
            ("latest", latest),
        )
        if given
    ]
    if len(chosen) != 1:
        raise ValueError(f"give exactly one start, not {len(chosen)}")
    if from_offset is not None:
        return AtOffsets(parse_offsets(from_offset))
    if from_timestamp is not None:
        return AtTime(parse_timestamp(from_timestamp))
    return Latest() if latest else Beginning()


def stop_of(to_offset: str | None = None, to_timestamp: str | None = None) -> Stop | None:
    """At most one end option, parsed (None: the end offsets when the replay starts)."""
    if to_offset is not None and to_timestamp is not None:
        raise ValueError("give at most one of --to-offset and --to-timestamp")
    if to_offset is not None:
        return AtOffsets(parse_offsets(to_offset))
    if to_timestamp is not None:
        return AtTime(parse_timestamp(to_timestamp))
    return None


def check_order(start: Start, stop: Stop | None) -> None:
    """A timestamp range must run forwards."""
    if isinstance(start, AtTime) and isinstance(stop, AtTime) and stop.at <= start.at:
        raise ValueError("--to-timestamp must be later than --from-timestamp")


# -- resolving --------------------------------------------------------------------------------


def _named(
    offsets: tuple[PartitionOffset, ...], partitions: Sequence[TopicPartitionKey]
) -> dict[TopicPartitionKey, int]:
    """The partitions an offsets option names, with their offsets; unknown ones are refused."""
    known = set(partitions)
    topics = sorted({topic for topic, _ in partitions})
    named: dict[TopicPartitionKey, int] = {}
    for item in offsets:
        if item.topic is not None:
            if (item.topic, item.partition) not in known:
                raise ValueError(f"no partition {item.partition} on topic {item.topic!r}")
            named[(item.topic, item.partition)] = item.offset
            continue
        having = [(topic, item.partition) for topic in topics if (topic, item.partition) in known]
        if not having:
            raise ValueError(f"no partition {item.partition} on topics {', '.join(topics)}")
        for key in having:
            named[key] = item.offset
    return named


def resolve(
    start: Start,
    stop: Stop | None,
    partitions: Sequence[TopicPartitionKey],
    marks: Watermarks,
) -> list[PartitionRange]:
    """One range per covered partition, offsets clamped to what the partition holds."""
    check_order(start, stop)
    starts: dict[TopicPartitionKey, int]
    if isinstance(start, AtOffsets):
        starts = _named(start.offsets, partitions)
    else:
        starts = {}
        for key in partitions:
            if isinstance(start, Beginning):
                starts[key] = marks.beginning[key]
            elif isinstance(start, Latest):
                starts[key] = marks.end[key]
            else:
                found = marks.at_start_time.get(key)
                starts[key] = marks.end[key] if found is None else found
    stops: dict[TopicPartitionKey, int] = dict(marks.end)
    if isinstance(stop, AtOffsets):
        stops.update(_named(stop.offsets, partitions))
    elif isinstance(stop, AtTime):
        for key in partitions:
            found = marks.at_stop_time.get(key)
            if found is not None:
                stops[key] = found
    ranges = []
    for key in sorted(starts):
        low, high = marks.beginning[key], marks.end[key]
        first = min(max(starts[key], low), high)
        last = min(max(stops[key], first), high)
        ranges.append(PartitionRange(key[0], key[1], first, last))
    return ranges
