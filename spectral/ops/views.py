"""What the operations surfaces (HTTP API, console, MCP tools) read and do, written once: each
deployment's group progress, its dead letters by reason, one topic's dead letters, a redrive.

Only the deployments' own topics (and their ``.dlq`` topics) can be named: no surface is a way
to read arbitrary topics.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import cast

import asyncpg
from pydantic import BaseModel, ConfigDict

from spectral.api.resources import Resources
from spectral.consumer.replay import ReplayReport
from spectral.consumer.replay_range import Start, Stop
from spectral.dlq.records import DeadLetterRecord, Topics, read_dead_letters
from spectral.dlq.redrive import RedriveReport, redrive
from spectral.dlq.repository import RedriveRepository
from spectral.errors import PermanentError
from spectral.ops.lag import GroupProgress, group_progress

ReplayDryRun = Callable[[Start, Stop | None], Awaitable[ReplayReport]]


@dataclass(frozen=True)
class Deployment:
    """A consumer deployment as the operations surfaces see it."""

    name: str
    group: str
    topics: tuple[str, ...]
    replay_dry_run: ReplayDryRun | None = None


class UnknownTopicError(PermanentError):
    """A topic that belongs to no consumer deployment."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReasonCount(_Model):
    reason: str
    count: int
    redriven: int


class DeadLetterTopicOut(_Model):
    deployment: str
    topic: str
    dlq_topic: str
    total: int
    not_redriven: int
    reasons: list[ReasonCount]


def find_topics(deployments: Sequence[Deployment], name: str) -> Topics:
    """The source and dead-letter topic of ``name`` (T or T.dlq) if a deployment reads T."""
    topics = Topics.of(name)
    if not any(topics.source in d.topics for d in deployments):
        raise UnknownTopicError("not a topic of any consumer deployment (give T or T.dlq)")
    return topics


async def redriven(resources: Resources, dlq_topic: str) -> set[tuple[int, int]]:
    async with resources.operator.acquire() as conn:
        return await RedriveRepository(cast("asyncpg.Connection", conn)).redriven(dlq_topic)


async def dead_letters(
    resources: Resources, topics: Topics, reason: str | None = None
) -> tuple[list[DeadLetterRecord], set[tuple[int, int]]]:
    """One topic's dead letters (of ``reason``), oldest first per partition, and which of them
    were redriven (their positions)."""
    records = await read_dead_letters(resources.settings, resources.kafka_bootstrap, topics.dlq)
    chosen = [r for r in records if reason is None or r.reason == reason]
    return chosen, await redriven(resources, topics.dlq)


async def dead_letter_topics(
    resources: Resources, deployments: Sequence[Deployment]
) -> list[DeadLetterTopicOut]:
    """Every deployment topic's dead letters, counted by reason."""
    out = []
    for d in deployments:
        for topic in d.topics:
            topics = Topics.of(topic)
            records, done = await dead_letters(resources, topics)
            out.append(summarize(d.name, topics, records, done))
    return out


async def progress(resources: Resources, deployments: Sequence[Deployment]) -> list[GroupProgress]:
    return [
        await group_progress(
            resources.settings,
            resources.kafka_bootstrap,
            deployment=d.name,
            group=d.group,
            topics=d.topics,
        )
        for d in deployments
    ]


async def redrive_topic(
    resources: Resources, topics: Topics, *, reason: str | None, dry_run: bool
) -> RedriveReport:
    async with resources.operator.acquire() as conn:
        return await redrive(
            resources.settings,
            resources.kafka_bootstrap,
            cast("asyncpg.Connection", conn),
            topic=topics.source,
            reason=reason,
            dry_run=dry_run,
        )


def summarize(
    deployment: str,
    topics: Topics,
    records: Sequence[DeadLetterRecord],
    done: set[tuple[int, int]],
) -> DeadLetterTopicOut:
    counts: Counter[str] = Counter()
    redriven_counts: Counter[str] = Counter()
    for r in records:
        counts[r.reason] += 1
        if r.position in done:
            redriven_counts[r.reason] += 1
    return DeadLetterTopicOut(
        deployment=deployment,
        topic=topics.source,
        dlq_topic=topics.dlq,
        total=len(records),
        not_redriven=len(records) - sum(redriven_counts.values()),
        reasons=[
            ReasonCount(reason=reason, count=n, redriven=redriven_counts[reason])
            for reason, n in counts.most_common()
        ],
    )
