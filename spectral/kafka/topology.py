"""The topics spectral needs, declared, and the plan that brings a cluster to them (no I/O).

Every registered event type has its topic (``<prefix><event_type>``) and its dead-letter topic
(``<topic>.dlq``). Each is declared with its partitions, replication factor and the settings that
matter to spectral's guarantees:

* ``max.message.bytes``: the contract's record limit (1 MiB) plus room for headers and batch
  framing, so any record the contract accepts fits; the dead-letter topic is sized to its source
  (the source's limit, as declared or as the cluster has it if larger, plus room for the ``dlq.*``
  headers and the failure history), so every record the source accepted can be dead-lettered
  with its original bytes;
* ``retention.ms``: how long records can be replayed (dead letters are kept longer: operators
  need time to look at them); ``cleanup.policy=delete``;
* ``segment.ms``: a seventh of the retention, between a minute and a day (:func:`segment_ms`).
  Kafka deletes (and compacts) whole closed segments only, and a segment closes when a record
  arrives after ``segment.ms`` (7 days by default) or the broker's roll check finds it too old:
  on a quiet topic the default keeps records up to retention + 7 days, and the dedup horizon
  (retention.py) must wait for that long too;
* ``min.insync.replicas``: 2 when the replication factor is 3 or more (with ``acks=all`` an
  acknowledged record survives the loss of a broker), else 1.

:func:`plan` compares the declaration with what the cluster has and decides, per difference,
whether applying changes it. It never shrinks anything silently: fewer partitions cannot be
done at all, a smaller retention or size limit and a lower ``min.insync.replicas`` are applied
only with ``allow_shrink`` (so is turning compaction off: a compacted topic keeps each key's
newest record past its retention, which ``delete`` would drop); adding partitions moves keys to
other partitions (per-key order is not kept across the change), so it needs
``allow_repartition``; a different replication factor needs a partition reassignment and is
only reported.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from contracts import MAX_PRODUCE_BYTES, MAX_RECORD_BYTES
from spectral.kafka.topics import dlq_topic, topic_for

RECORD_HEADROOM: Final = MAX_PRODUCE_BYTES - MAX_RECORD_BYTES
"""Headers and record-batch framing on top of the contract's limit (the contract's producer
request limit is the topics' record limit)."""
DLQ_HEADROOM: Final = 256 * 1024
"""The ``dlq.*`` headers and the failure history a dead letter adds to its record."""
DAY_MS: Final = 24 * 3600 * 1000
MINUTE_MS: Final = 60 * 1000
SHRINKABLE: Final = frozenset({"retention.ms", "max.message.bytes", "min.insync.replicas"})
"""Numeric settings where a lower value takes something away (-1 means unlimited)."""


@dataclass(frozen=True)
class TopicPolicy:
    partitions: int = 3
    replication_factor: int | None = None
    """None: min(3, number of brokers)."""
    retention_ms: int = 7 * DAY_MS
    dlq_retention_ms: int = 30 * DAY_MS


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int
    config: Mapping[str, str]
    source: str | None = None
    """For a dead-letter topic: the topic it takes the dead letters of."""


@dataclass(frozen=True)
class ExistingTopic:
    name: str
    partitions: int
    replication_factor: int
    config: Mapping[str, str]
    """Every setting's effective value (defaults included)."""
    dynamic: Mapping[str, str] = field(default_factory=dict)
    """The settings set on the topic itself (what an alter must carry over)."""


class Action(StrEnum):
    CREATE = "create"
    ADD_PARTITIONS = "add_partitions"
    SET_CONFIG = "set_config"
    REFUSED = "refused"
    """A change that would take something away (or is impossible); not applied."""
    REPORT = "report"
    """A difference spectral does not change (replication factor)."""


@dataclass(frozen=True)
class Change:
    topic: str
    action: Action
    setting: str
    current: str | None
    desired: str
    note: str = ""

    @property
    def applies(self) -> bool:
        return self.action in {Action.CREATE, Action.ADD_PARTITIONS, Action.SET_CONFIG}

    def describe(self) -> str:
        if self.action is Action.CREATE:
            return f"+ {self.topic}: create ({self.desired})"
        mark = {"refused": "!", "report": "~"}.get(self.action.value, "*")
        text = f"{mark} {self.topic}: {self.setting} {self.current} -> {self.desired}"
        return f"{text} ({self.note})" if self.note else text


def segment_ms(retention_ms: int) -> int:
    """How often a topic's active segment rolls: a seventh of ``retention_ms`` (a record then
    lives at most ~8/7 of it), between a minute (tiny segments cost file handles) and a day;
    a day for an unlimited retention."""
    if retention_ms <= 0:
        return DAY_MS
    return min(DAY_MS, max(MINUTE_MS, retention_ms // 7))


def replication_for(policy: TopicPolicy, brokers: int) -> int:
    return policy.replication_factor or max(1, min(3, brokers))


def declared_topics(
    event_types: Iterable[str],
    prefix: str,
    policy: TopicPolicy,
    brokers: int,
    existing: Mapping[str, ExistingTopic] | None = None,
) -> list[TopicSpec]:
    """Every topic spectral needs, with its settings (``existing`` sizes the dead-letter topics
    to a source whose limit was raised on the cluster)."""
    replication = replication_for(policy, brokers)
    min_isr = "2" if replication >= 3 else "1"  # noqa: PLR2004 - the rule in the docstring
    record_limit = MAX_PRODUCE_BYTES
    specs: list[TopicSpec] = []
    for event_type in sorted(event_types):
        topic = topic_for(event_type, prefix)
        specs.append(
            TopicSpec(
                topic,
                policy.partitions,
                replication,
                {
                    "cleanup.policy": "delete",
                    "retention.ms": str(policy.retention_ms),
                    "segment.ms": str(segment_ms(policy.retention_ms)),
                    "max.message.bytes": str(record_limit),
                    "min.insync.replicas": min_isr,
                },
            )
        )
        current = (existing or {}).get(topic)
        source_limit = max(
            record_limit, _int(current.config.get("max.message.bytes")) if current else 0
        )
        specs.append(
            TopicSpec(
                dlq_topic(topic),
                policy.partitions,
                replication,
                {
                    "cleanup.policy": "delete",
                    "retention.ms": str(policy.dlq_retention_ms),
                    "segment.ms": str(segment_ms(policy.dlq_retention_ms)),
                    "max.message.bytes": str(source_limit + DLQ_HEADROOM),
                    "min.insync.replicas": min_isr,
                },
                source=topic,
            )
        )
    return specs


def plan(
    declared: Iterable[TopicSpec],
    existing: Mapping[str, ExistingTopic],
    *,
    allow_shrink: bool = False,
    allow_repartition: bool = False,
) -> list[Change]:
    """What differs between the declaration and the cluster, and what applying would do."""
    changes: list[Change] = []
    for spec in declared:
        current = existing.get(spec.name)
        if current is None:
            settings = ", ".join(f"{k}={v}" for k, v in sorted(spec.config.items()))
            changes.append(
                Change(
                    spec.name,
                    Action.CREATE,
                    "topic",
                    None,
                    f"partitions={spec.partitions}, replication={spec.replication_factor}, "
                    f"{settings}",
                )
            )
            continue
        changes.extend(_partition_changes(spec, current, allow_repartition=allow_repartition))
        if current.replication_factor != spec.replication_factor:
            changes.append(
                Change(
                    spec.name,
                    Action.REPORT,
                    "replication",
                    str(current.replication_factor),
                    str(spec.replication_factor),
                    "needs a partition reassignment (kafka-reassign-partitions); not changed",
                )
            )
        for key, desired in sorted(spec.config.items()):
            have = current.config.get(key)
            if have == desired:
                continue
            taken = _takes_away(key, have, desired)
            if taken and not allow_shrink:
                changes.append(
                    Change(
                        spec.name,
                        Action.REFUSED,
                        key,
                        have,
                        desired,
                        f"{taken}: pass --allow-shrink to apply",
                    )
                )
                continue
            changes.append(Change(spec.name, Action.SET_CONFIG, key, have, desired))
    return changes


def _partition_changes(
    spec: TopicSpec, current: ExistingTopic, *, allow_repartition: bool
) -> list[Change]:
    have, want = current.partitions, spec.partitions
    if have == want:
        return []
    if want < have:
        return [
            Change(
                spec.name,
                Action.REPORT,
                "partitions",
                str(have),
                str(want),
                "Kafka cannot remove partitions; kept",
            )
        ]
    if not allow_repartition:
        return [
            Change(
                spec.name,
                Action.REFUSED,
                "partitions",
                str(have),
                str(want),
                "adding partitions moves keys (per-key order breaks across the change): pass "
                "--allow-repartition",
            )
        ]
    return [Change(spec.name, Action.ADD_PARTITIONS, "partitions", str(have), str(want))]


def _takes_away(key: str, have: str | None, desired: str) -> str | None:
    """Why setting ``key`` from ``have`` to ``desired`` takes something away (None: it does
    not)."""
    if key in SHRINKABLE and _shrinks(have, desired):
        return "lower than the cluster has"
    if key == "cleanup.policy" and have is not None:
        kept = {p.strip() for p in have.split(",")}
        if "compact" in kept and "compact" not in {p.strip() for p in desired.split(",")}:
            return (
                "the cluster compacts this topic (each key's newest record is kept past the "
                "retention); delete would drop them"
            )
    return None


def _int(value: str | None) -> int:
    try:
        return int(value) if value is not None else 0
    except ValueError:
        return 0


def _shrinks(have: str | None, desired: str) -> bool:
    """True when ``desired`` is less than ``have`` (-1 = unlimited, the most)."""
    if have is None:
        return False
    try:
        current, wanted = int(have), int(desired)
    except ValueError:
        return False
    if current == -1:
        return wanted != -1
    return wanted != -1 and wanted < current
