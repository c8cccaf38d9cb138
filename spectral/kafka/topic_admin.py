"""Reading and changing topics on a cluster, for ``spectral topics plan|apply``.

Reads never create a topic: a Kafka metadata request naming a missing topic creates it on a
broker with ``auto.create.topics.enable`` (aiokafka always asks for that), so topics are named
in a request only once ``list_topics`` (a request for all topics, which creates nothing) has
shown that they exist.

Settings are changed with AlterConfigs, which replaces a topic's whole set of dynamic settings:
the settings already set on the topic are carried over, with the planned changes on top.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from spectral.errors import PermanentError, TransientError
from spectral.kafka.partitions import admin_client
from spectral.kafka.topology import Action, Change, ExistingTopic, TopicSpec
from spectral.settings import Settings

DYNAMIC_TOPIC_CONFIG = 1
"""DescribeConfigs' config_source of a setting set on the topic itself."""
TOPIC_ALREADY_EXISTS = 36
LEADER_WAIT_SECONDS = 30.0


async def existing_topic_names(admin: AIOKafkaAdminClient, names: Iterable[str]) -> set[str]:
    """Which of ``names`` exist (without creating any)."""
    return set(names) & set(await admin.list_topics())


async def missing_topics(settings: Settings, bootstrap: str, names: Iterable[str]) -> list[str]:
    """Which of ``names`` do not exist (creates none)."""
    wanted = set(names)
    async with admin_client(settings, bootstrap, "Kafka unavailable") as admin:
        return sorted(wanted - await existing_topic_names(admin, wanted))


async def describe(
    settings: Settings, bootstrap: str, names: Sequence[str]
) -> tuple[int, dict[str, ExistingTopic]]:
    """The number of brokers, and the topics among ``names`` that exist, as they are."""
    async with admin_client(settings, bootstrap, "Kafka unavailable") as admin:
        cluster = await admin.describe_cluster()
        present = sorted(await existing_topic_names(admin, names))
        found: dict[str, ExistingTopic] = {}
        if present:
            described = {t["topic"]: t for t in await admin.describe_topics(present)}
            responses = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, name) for name in present]
            )
            configs = _configs(responses)
            for name in present:
                partitions = described.get(name, {}).get("partitions", [])
                effective, dynamic = configs.get(name, ({}, {}))
                found[name] = ExistingTopic(
                    name,
                    len(partitions),
                    len(partitions[0]["replicas"]) if partitions else 0,
                    effective,
                    dynamic,
                )
    return len(cluster.get("brokers", [])), found


def _configs(responses: Iterable[Any]) -> dict[str, tuple[dict[str, str], dict[str, str]]]:
    out: dict[str, tuple[dict[str, str], dict[str, str]]] = {}
    for response in responses:
        for resource in response.to_object().get("resources", []):
            if resource.get("error_code", 0):
                raise TransientError(
                    f"cannot read the settings of {resource.get('resource_name')}: "
                    f"{resource.get('error_message')}"
                )
            effective: dict[str, str] = {}
            dynamic: dict[str, str] = {}
            for entry in resource.get("config_entries", []):
                name, value = entry["config_names"], entry["config_value"]
                if value is None:
                    continue
                effective[name] = value
                if entry.get("config_source") == DYNAMIC_TOPIC_CONFIG:
                    dynamic[name] = value
            out[resource["resource_name"]] = (effective, dynamic)
    return out


async def apply(
    settings: Settings,
    bootstrap: str,
    declared: Sequence[TopicSpec],
    changes: Sequence[Change],
    existing: Mapping[str, ExistingTopic],
) -> None:
    """Carry out the applicable ``changes``; wait until every created partition has a leader."""
    specs = {spec.name: spec for spec in declared}
    async with admin_client(settings, bootstrap, "applying the topic plan failed") as admin:
        creates = [specs[c.topic] for c in changes if c.action is Action.CREATE]
        if creates:
            response = await admin.create_topics(
                [
                    NewTopic(s.name, s.partitions, s.replication_factor, topic_configs=s.config)
                    for s in creates
                ]
            )
            _check(response.to_object().get("topic_errors", []), "create")
        grow = {
            c.topic: NewPartitions(int(c.desired))
            for c in changes
            if c.action is Action.ADD_PARTITIONS
        }
        if grow:
            response = await admin.create_partitions(grow)
            _check(response.to_object().get("topic_errors", []), "add partitions to")
        altered: dict[str, dict[str, str]] = {}
        for change in changes:
            if change.action is Action.SET_CONFIG:
                altered.setdefault(change.topic, dict(existing[change.topic].dynamic))
                altered[change.topic][change.setting] = change.desired
        if altered:
            responses = await admin.alter_configs(
                [
                    ConfigResource(ConfigResourceType.TOPIC, topic, values)
                    for topic, values in altered.items()
                ]
            )
            for response in responses:
                _check(response.to_object().get("resources", []), "change the settings of")
        if creates or grow:
            await _await_leaders(admin, [*(s.name for s in creates), *grow])


def _check(errors: Iterable[Mapping[str, Any]], what: str) -> None:
    for error in errors:
        code = int(error.get("error_code", 0))
        if code and code != TOPIC_ALREADY_EXISTS:
            topic = error.get("topic") or error.get("resource_name")
            raise PermanentError(
                f"Kafka refused to {what} {topic}: {error.get('error_message') or code}"
            )


async def _await_leaders(admin: AIOKafkaAdminClient, topics: Sequence[str]) -> None:
    """Wait until every partition of ``topics`` has a leader (clients that start right after
    would otherwise log leader-not-available warnings)."""
    deadline = time.monotonic() + LEADER_WAIT_SECONDS
    while True:
        described = await admin.describe_topics(list(topics))
        if all(
            t.get("error_code", 0) == 0
            and t.get("partitions")
            and all(p.get("leader", -1) >= 0 for p in t["partitions"])
            for t in described
        ):
            return
        if time.monotonic() > deadline:
            raise TransientError(f"topics created but without leaders after {LEADER_WAIT_SECONDS}s")
        await asyncio.sleep(0.2)
