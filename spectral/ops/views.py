"""What the operations surfaces (HTTP API, console, MCP tools) read and do, written once: each
deployment's group progress, its dead letters by reason, one topic's dead letters, a redrive.

Only the deployments' own topics (and their ``.dlq`` topics) can be named: no surface is a way
to read arbitrary topics.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import cast

import asyncpg
from pydantic import BaseModel, ConfigDict, Field

from spectral.api.resources import Resources
from spectral.dlq.records import (
    DeadLetterPage,
    Position,
    ReasonCounts,
    Topics,
    count_reasons,
    list_dead_letters,
)
from spectral.dlq.redrive import RedriveReport, redrive
from spectral.dlq.repository import RedriveRepository
from spectral.errors import PermanentError
from spectral.ops.lag import GroupProgress, group_progress
from spectral.replay.range import Start, Stop
from spectral.replay.replay import ReplayReport

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
    scanned: int = Field(description="Dead letters read to count the reasons (the oldest).")
    truncated: bool = Field(
        description="The count stopped at its read limit: reasons cover the oldest "
        "`scanned` dead letters only (total and not_redriven are exact)."
    )


def find_topics(deployments: Sequence[Deployment], name: str) -> Topics:
    """The source and dead-letter topic of ``name`` (T or T.dlq) if a deployment reads T."""
    topics = Topics.of(name)
    if not any(topics.source in d.topics for d in deployments):
        raise UnknownTopicError("not a topic of any consumer deployment (give T or T.dlq)")
    return topics


@contextlib.asynccontextmanager
async def _repository(resources: Resources) -> AsyncIterator[RedriveRepository]:
    async with resources.operator.acquire() as conn:
        yield RedriveRepository(cast("asyncpg.Connection", conn))


async def dead_letters(
    resources: Resources,
    topics: Topics,
    *,
    reason: str | None = None,
    limit: int = 100,
    after: Position | None = None,
) -> tuple[DeadLetterPage, set[Position]]:
    """A page of one topic's dead letters (of ``reason``) after ``after``, oldest first per
    partition, and which of them were redriven (their positions)."""
    page = await list_dead_letters(
        resources.settings,
        resources.kafka_bootstrap,
        topics.dlq,
        reason=reason,
        limit=limit,
        after=after,
    )
    async with _repository(resources) as repository:
        done = await repository.redriven(topics.dlq, [s.position for s in page.summaries])
    return page, done


async def dead_letter_topics(
    resources: Resources, deployments: Sequence[Deployment]
) -> list[DeadLetterTopicOut]:
    """Every deployment topic's dead letters, counted by reason (over a bounded read)."""
    out = []
    for d in deployments:
        for topic in d.topics:
            topics = Topics.of(topic)
            counts = await count_reasons(resources.settings, resources.kafka_bootstrap, topics.dlq)
            async with _repository(resources) as repository:
                done = await repository.redriven(topics.dlq, list(counts.scanned))
                present = await repository.redriven_present(topics.dlq, counts.firsts)
            out.append(summarize(d.name, topics, counts, done, present))
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
    counts: ReasonCounts,
    done: set[Position],
    redriven_present: int,
) -> DeadLetterTopicOut:
    """``done``: the scanned dead letters that were redriven; ``redriven_present``: how many of
    the topic's were."""
    redriven_counts: Counter[str] = Counter(
        reason for position, reason in counts.scanned.items() if position in done
    )
    return DeadLetterTopicOut(
        deployment=deployment,
        topic=topics.source,
        dlq_topic=topics.dlq,
        total=counts.total,
        not_redriven=max(0, counts.total - redriven_present),
        reasons=[
            ReasonCount(reason=reason, count=n, redriven=redriven_counts[reason])
            for reason, n in counts.by_reason.most_common()
        ],
        scanned=len(counts.scanned),
        truncated=counts.truncated,
    )
