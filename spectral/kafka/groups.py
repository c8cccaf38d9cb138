"""Consumer groups: who is in one, what it has committed, and committing for it from outside.

``describe_group`` asks the group's coordinator (DescribeGroups) for its state and members.
aiokafka 0.14 decodes a v3 response with the v2 schema, which misaligns every group after the
first: groups are described one per request.

``commit_for_group`` commits offsets on behalf of a group without joining it (manual
assignment: generation -1, no member id). Kafka accepts that only while the group has no
members, so the broker itself refuses a reset that races a consumer joining the group.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from spectral.errors import PermanentError, TransientError
from spectral.kafka.config import client_kwargs
from spectral.kafka.partitions import TopicPartitionKey, admin_client
from spectral.settings import Settings

GROUP_ID_NOT_FOUND = 69


@dataclass(frozen=True, slots=True)
class GroupMember:
    member_id: str
    client_id: str
    client_host: str


@dataclass(frozen=True, slots=True)
class GroupState:
    group: str
    state: str
    """Kafka's word for it: Empty, Stable, PreparingRebalance, CompletingRebalance, Dead."""
    members: tuple[GroupMember, ...]

    @property
    def active(self) -> bool:
        return bool(self.members)

    def why_busy(self) -> str:
        """A sentence naming the members, for a refusal."""
        clients = sorted({f"{m.client_id}@{m.client_host.lstrip('/')}" for m in self.members})
        return (
            f"group {self.group!r} is {self.state} with {len(self.members)} active "
            f"member{'s' if len(self.members) != 1 else ''} (clients: {', '.join(clients)})"
        )


def membership_lost(consumer: AIOKafkaConsumer) -> bool:
    """True when this group member's membership was lost (its session expired, e.g. the process
    was frozen) and it has not joined again.

    aiokafka (0.14) then commits with generation -1, which Kafka accepts as soon as the group is
    empty: a stale member's commit would move the group's offsets back. aiokafka exposes no
    public accessor, so this reads its coordinator's generation (pinned version, see
    pyproject.toml)."""
    coordinator = getattr(consumer, "_coordinator", None)
    generation = getattr(coordinator, "generation", None)
    return isinstance(generation, int) and generation < 0


async def describe_group(settings: Settings, bootstrap: str, group: str) -> GroupState:
    async with admin_client(settings, bootstrap, f"could not describe group {group!r}") as admin:
        responses = await admin.describe_consumer_groups([group])
    for response in responses:
        for entry in response.to_object().get("groups", []):
            if entry.get("group") == group:
                return _group_state(group, entry)
    return GroupState(group, "Dead", ())


def _group_state(group: str, entry: Mapping[str, Any]) -> GroupState:
    code = int(entry.get("error_code", 0))
    if code == GROUP_ID_NOT_FOUND:
        return GroupState(group, "Dead", ())
    if code:
        raise TransientError(f"describing group {group!r} failed with Kafka error code {code}")
    members = tuple(
        GroupMember(
            str(m.get("member_id", "")), str(m.get("client_id", "")), str(m.get("client_host", ""))
        )
        for m in entry.get("members", [])
    )
    return GroupState(group, str(entry.get("state", "")), members)


async def committed_offsets(
    settings: Settings, bootstrap: str, group: str, partitions: Sequence[TopicPartitionKey]
) -> dict[TopicPartitionKey, int | None]:
    """The group's committed offset per partition (None: nothing committed)."""
    failure = f"could not read the offsets of group {group!r}"
    async with admin_client(settings, bootstrap, failure) as admin:
        found = await admin.list_consumer_group_offsets(
            group, partitions=[TopicPartition(t, p) for t, p in partitions]
        )
    out: dict[TopicPartitionKey, int | None] = dict.fromkeys(partitions)
    for tp, meta in found.items():
        out[(tp.topic, tp.partition)] = meta.offset if meta.offset >= 0 else None
    return out


async def commit_for_group(
    settings: Settings, bootstrap: str, group: str, offsets: Mapping[TopicPartitionKey, int]
) -> None:
    """Commit ``offsets`` for ``group`` without joining it (refused by Kafka if it has members)."""
    if not offsets:
        return
    consumer = AIOKafkaConsumer(
        **client_kwargs(settings, bootstrap),
        group_id=group,
        client_id="spectral-offsets-reset",
        enable_auto_commit=False,
    )
    tps = {TopicPartition(t, p): offset for (t, p), offset in offsets.items()}
    try:
        await consumer.start()
        consumer.assign(list(tps))
        await consumer.commit(tps)
    except KafkaError as exc:
        if getattr(exc, "retriable", False):
            raise TransientError(f"could not commit for group {group!r}: {exc}") from exc
        raise PermanentError(
            f"Kafka refused the commit for group {group!r} ({type(exc).__name__}: {exc}); "
            "a consumer has probably joined it meanwhile"
        ) from exc
    finally:
        with contextlib.suppress(Exception):
            await consumer.stop()
