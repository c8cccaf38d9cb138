"""How long the broker can keep a record readable: the topic settings that bound it.

``spectral maintenance`` forgets a dedup key only once no record that carries it can still be read
(docs/explanation/bounded-state.md). Kafka deletes a record with its whole log segment, at the first
retention check after the segment's largest timestamp is older than ``retention.ms``. A segment
rolls ``segment.ms`` (+ ``segment.jitter.ms``) after its first record at the latest, and a record
may carry a timestamp up to ``message.timestamp.after.max.ms`` in the future, so a record appended
at time *a* can be read until, at most,

    a + retention.ms + segment.ms + segment.jitter.ms + message.timestamp.after.max.ms
      + log.retention.check.interval.ms (broker)

A topic with ``retention.ms = -1`` or a ``cleanup.policy`` of ``compact`` alone keeps records
for ever. Describing configurations never creates a topic; a topic that does not exist holds no
record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from spectral.errors import PermanentError
from spectral.kafka.partitions import admin_client
from spectral.settings import Settings

UNKNOWN_TOPIC_OR_PARTITION = 3
TOPIC_SETTINGS = (
    "retention.ms",
    "segment.ms",
    "segment.jitter.ms",
    "message.timestamp.after.max.ms",
    "cleanup.policy",
)
CHECK_INTERVAL = "log.retention.check.interval.ms"


@dataclass(frozen=True, slots=True)
class TopicRetention:
    """What bounds the life of one topic's records (``exists`` False: the topic holds none)."""

    topic: str
    exists: bool
    retention_ms: int = -1
    segment_ms: int = 0
    segment_jitter_ms: int = 0
    timestamp_after_max_ms: int = 0
    cleanup_policy: str = "delete"

    @property
    def unbounded(self) -> bool:
        """Records may stay readable for ever."""
        policies = {p.strip() for p in self.cleanup_policy.split(",")}
        return self.exists and (self.retention_ms < 0 or "delete" not in policies)

    def readable_for(self, check_interval_ms: int) -> timedelta | None:
        """The longest a record of this topic can stay readable after it was appended (None:
        for ever; zero: the topic does not exist)."""
        if not self.exists:
            return timedelta(0)
        if self.unbounded:
            return None
        return timedelta(
            milliseconds=self.retention_ms
            + self.segment_ms
            + self.segment_jitter_ms
            + self.timestamp_after_max_ms
            + check_interval_ms
        )


@dataclass(frozen=True, slots=True)
class BrokerRetention:
    topics: tuple[TopicRetention, ...]
    check_interval_ms: int
    """The largest ``log.retention.check.interval.ms`` of the cluster's brokers."""


def _entries(resource: dict[str, Any]) -> dict[str, str]:
    return {
        entry["config_names"]: entry["config_value"]
        for entry in resource.get("config_entries", [])
        if entry.get("config_value") is not None
    }


def _topic(resource: dict[str, Any]) -> TopicRetention:
    name = str(resource["resource_name"])
    if resource.get("error_code", 0) == UNKNOWN_TOPIC_OR_PARTITION:
        return TopicRetention(name, exists=False)
    if resource.get("error_code", 0) != 0:
        raise PermanentError(
            f"describing topic {name!r} failed: error {resource['error_code']} "
            f"{resource.get('error_message') or ''}".rstrip()
        )
    values = _entries(resource)
    return TopicRetention(
        name,
        exists=True,
        retention_ms=int(values.get("retention.ms", "-1")),
        segment_ms=int(values.get("segment.ms", "0")),
        segment_jitter_ms=int(values.get("segment.jitter.ms", "0")),
        timestamp_after_max_ms=int(values.get("message.timestamp.after.max.ms", "0")),
        cleanup_policy=values.get("cleanup.policy", "delete"),
    )


async def describe_retention(
    settings: Settings, bootstrap: str, topics: Sequence[str]
) -> BrokerRetention:
    """The retention settings of ``topics`` and the brokers' retention check interval."""
    async with admin_client(settings, bootstrap, "Kafka unavailable") as admin:
        cluster = await admin.describe_cluster()
        brokers = [str(b["node_id"]) for b in cluster.get("brokers", [])]
        resources = [
            ConfigResource(ConfigResourceType.TOPIC, topic, dict.fromkeys(TOPIC_SETTINGS))
            for topic in sorted(set(topics))
        ] + [
            ConfigResource(ConfigResourceType.BROKER, broker, {CHECK_INTERVAL: None})
            for broker in brokers
        ]
        responses = await admin.describe_configs(resources) if resources else []
    found: list[TopicRetention] = []
    intervals: list[int] = []
    for response in responses:
        for resource in response.to_object()["resources"]:
            if resource["resource_type"] == ConfigResourceType.TOPIC:
                found.append(_topic(resource))
            elif resource.get("error_code", 0) == 0:
                value = _entries(resource).get(CHECK_INTERVAL)
                if value is not None:
                    intervals.append(int(value))
    if brokers and len(intervals) < len(brokers):
        raise PermanentError(f"could not read {CHECK_INTERVAL} of every broker ({brokers})")
    return BrokerRetention(tuple(sorted(found, key=lambda t: t.topic)), max(intervals, default=0))
