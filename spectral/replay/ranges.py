"""The offsets a replay or an offsets reset covers, as the broker has them now (the pure rules
are range.py)."""

from __future__ import annotations

from collections.abc import Sequence

from spectral.kafka.partitions import fetch_watermarks, topic_partitions
from spectral.kafka.topics import topic_for
from spectral.replay.range import AtTime, PartitionRange, Start, Stop, resolve
from spectral.settings import Settings


async def plan_ranges(
    settings: Settings,
    bootstrap: str,
    event_types: Sequence[str],
    start: Start,
    stop: Stop | None,
) -> list[PartitionRange]:
    """The offsets a replay of these event types' topics covers, as of now."""
    topics = [topic_for(t, settings.topic_prefix) for t in event_types]
    partitions = await topic_partitions(settings, bootstrap, topics)
    marks = await fetch_watermarks(
        settings,
        bootstrap,
        partitions,
        start_time=start.at if isinstance(start, AtTime) else None,
        stop_time=stop.at if isinstance(stop, AtTime) else None,
    )
    return resolve(start, stop, partitions, marks)
