"""Lag and progress of a consumer group per partition, read from Kafka alone.

For each partition of the deployment's topics: the group's committed offset, the end offset,
their difference (the lag), and the broker timestamp of the last record the group committed
past (``committed - 1``): how far in time the group has got. Nothing here needs the consumer to
run; a group that never committed shows no committed offset and the whole partition as lag.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from spectral.errors import TransientError
from spectral.kafka.groups import committed_offsets, describe_group
from spectral.kafka.partitions import fetch_watermarks, standalone_consumer, topic_partitions
from spectral.replay.range import TopicPartitionKey
from spectral.settings import Settings

_TIMESTAMP_PATIENCE_SECONDS: Final = 5.0


@dataclass(frozen=True, slots=True)
class PartitionProgress:
    topic: str
    partition: int
    committed: int | None
    end: int
    lag: int
    last_committed_record_at: datetime | None

    def to_json(self) -> dict[str, Any]:
        at = self.last_committed_record_at
        return {
            "topic": self.topic,
            "partition": self.partition,
            "committed": self.committed,
            "end": self.end,
            "lag": self.lag,
            "last_committed_record_at": at.isoformat() if at else None,
        }


@dataclass(frozen=True, slots=True)
class GroupProgress:
    deployment: str
    group: str
    state: str
    members: int
    partitions: tuple[PartitionProgress, ...]

    @property
    def total_lag(self) -> int:
        return sum(p.lag for p in self.partitions)

    def to_json(self) -> dict[str, Any]:
        return {
            "deployment": self.deployment,
            "group": self.group,
            "state": self.state,
            "members": self.members,
            "total_lag": self.total_lag,
            "partitions": [p.to_json() for p in self.partitions],
        }


async def group_progress(
    settings: Settings, bootstrap: str, *, deployment: str, group: str, topics: Sequence[str]
) -> GroupProgress:
    partitions = await topic_partitions(settings, bootstrap, topics)
    state = await describe_group(settings, bootstrap, group)
    if not partitions:
        return GroupProgress(deployment, group, state.state, len(state.members), ())
    marks = await fetch_watermarks(settings, bootstrap, partitions)
    committed = await committed_offsets(settings, bootstrap, group, partitions)
    stamps = await _last_committed_stamps(settings, bootstrap, committed, marks.beginning)
    rows = []
    for key in partitions:
        end = marks.end.get(key, 0)
        done = committed.get(key)
        start = marks.beginning.get(key, 0)
        lag = max(end - (done if done is not None else start), 0)
        rows.append(PartitionProgress(key[0], key[1], done, end, lag, stamps.get(key)))
    return GroupProgress(deployment, group, state.state, len(state.members), tuple(rows))


async def _last_committed_stamps(
    settings: Settings,
    bootstrap: str,
    committed: Mapping[TopicPartitionKey, int | None],
    beginning: Mapping[TopicPartitionKey, int],
) -> dict[TopicPartitionKey, datetime]:
    """The timestamp of the record at ``committed - 1`` where it is still in the partition."""
    wanted = {
        TopicPartition(t, p): offset - 1
        for (t, p), offset in committed.items()
        if offset is not None and offset - 1 >= beginning.get((t, p), 0)
    }
    if not wanted:
        return {}
    found: dict[TopicPartitionKey, datetime] = {}
    async with standalone_consumer(settings, bootstrap) as consumer:
        try:
            consumer.assign(list(wanted))
            for tp, offset in wanted.items():
                consumer.seek(tp, offset)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + _TIMESTAMP_PATIENCE_SECONDS
            pending = set(wanted)
            while pending and loop.time() < deadline:
                fetched = await consumer.getmany(*pending, timeout_ms=200, max_records=1)
                for tp, records in fetched.items():
                    for record in records:
                        if record.offset >= wanted[tp] and tp in pending:
                            found[(tp.topic, tp.partition)] = datetime.fromtimestamp(
                                record.timestamp / 1000, UTC
                            )
                            pending.discard(tp)
                            consumer.pause(tp)
        except KafkaError as exc:
            raise TransientError(f"Kafka unavailable: {exc}") from exc
    return found
