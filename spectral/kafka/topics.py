"""Topic naming: the topic of an event is its event_type (behind an optional prefix)."""

from __future__ import annotations

from contracts.dead_letters import DLQ_SUFFIX

__all__ = ["DLQ_SUFFIX", "dlq_topic", "group_for", "is_dlq", "topic_for"]


def topic_for(event_type: str, prefix: str = "") -> str:
    """The topic that carries events of ``event_type``."""
    return f"{prefix}{event_type}"


def dlq_topic(topic: str) -> str:
    """Dead letters of topic T go to T.dlq."""
    return f"{topic}{DLQ_SUFFIX}"


def group_for(consumer: str, prefix: str = "") -> str:
    """The default consumer group of deployment ``consumer``: behind the same prefix as its
    topics, so deployments of two prefixes sharing a cluster never share a group."""
    return f"{prefix}{consumer}"


def is_dlq(topic: str) -> bool:
    return topic.endswith(DLQ_SUFFIX)
