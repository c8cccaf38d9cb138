"""Consumer operations over HTTP, for the consumer deployments the composition root names.

    GET  /ops/consumers                              list_consumers          ops:read
    GET  /ops/dead-letters                           dead_letter_summary     ops:read
    GET  /ops/dead-letters/{topic}                   list_dead_letters       ops:read
    POST /ops/dead-letters/{topic}/redrive           redrive_dead_letters    ops:read for a dry
                                                                             run, ops:redrive
    POST /ops/consumers/{deployment}/replay-dry-run  replay_dry_run          ops:read

Only the deployments' own topics (and their ``.dlq`` topics) can be named: the API is no way
to read arbitrary topics. Redrive and replay call spectral/dlq and spectral/replay/replay.py,
exactly what ``spectral dlq redrive`` and ``spectral replay --dry-run`` run.

A replay dry run holds one database transaction open while it reads its whole range (the rows
it changes stay locked until it rolls back, so the live consumer waits on them) and a Kafka
consumer of its own: the scope that reads lag may run one, but one at a time per deployment in
this process — a second is 409 ``dry-run-busy`` with ``Retry-After``, never a pile-up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field

from spectral.api.auth import missing_scope, requires
from spectral.api.problems import COMMON, ProblemError, ProblemType, not_found, responses
from spectral.api.resources import Resources
from spectral.auth.scopes import OPS_READ, OPS_REDRIVE
from spectral.auth.tokens import Principal
from spectral.dlq.records import Position, Topics, format_position, parse_position
from spectral.errors import ConfigurationError
from spectral.observability.logging import get_logger
from spectral.ops.views import (
    DeadLetterTopicOut,
    Deployment,
    UnknownTopicError,
    dead_letter_topics,
    dead_letters,
    find_topics,
    progress,
    redrive_topic,
)
from spectral.replay.range import check_order, start_of, stop_of


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PartitionOut(_Model):
    topic: str
    partition: int
    committed: int | None = Field(description="The group's committed offset; null: none yet.")
    end: int
    lag: int
    last_committed_record_at: str | None = Field(
        description="Broker timestamp of the last record the group committed past."
    )


class ConsumerOut(_Model):
    deployment: str
    group: str
    state: str = Field(description="Kafka's group state: Empty, Stable, Dead, ...")
    members: int
    total_lag: int
    partitions: list[PartitionOut]


class DeadLetterOut(BaseModel):
    model_config = ConfigDict(extra="allow")
    partition: int
    offset: int
    reason: str
    detail: str
    consumer: str
    failed_at: str
    source: str
    earlier_failures: int
    redriven: bool


class DeadLetterList(_Model):
    topic: str
    dlq_topic: str
    total: int = Field(description="Dead letters on the topic (all reasons), from its offsets.")
    dead_letters: list[DeadLetterOut]
    next_after: str | None = Field(
        description="More may follow: pass it as `after` for the next page (null: the topic "
        "was read to its end)."
    )
    truncated: bool = Field(
        description="The listing stopped at its read limit before the page filled (a filter "
        "matched little of what was read); `next_after` goes on from there."
    )


class RedriveIn(_Model):
    reason: Annotated[str, Field(max_length=200)] | None = Field(
        default=None, description="Only dead letters of this reason."
    )
    dry_run: bool = Field(
        default=True, description="true (default): report what would be redriven, send nothing."
    )


class RedrivenOut(_Model):
    dlq_partition: int
    dlq_offset: int
    reason: str
    partition: int | None
    offset: int | None


class RefusedOut(_Model):
    """A dead letter the broker would not take back (left for a later redrive)."""

    dlq_partition: int
    dlq_offset: int
    why: str


class RedriveOut(_Model):
    topic: str
    dlq_topic: str
    dry_run: bool
    examined: int
    redriven: int = Field(description="How many were redriven (0 in a dry run).")
    would_redrive: int | None = Field(
        default=None, description="A dry run: how many a redrive would send; null otherwise."
    )
    skipped: dict[str, int]
    records: list[RedrivenOut] = Field(
        description="The first 1,000 of them (redriven, or that a dry run would redrive), one "
        "by one."
    )
    records_truncated: bool = Field(
        default=False, description="`records` lists only the first of them."
    )
    refused: list[RefusedOut] = Field(default_factory=list)


class ReplayIn(_Model):
    """The range, as for ``spectral replay``: exactly one start, at most one end."""

    from_beginning: bool = False
    from_offset: Annotated[str, Field(max_length=2000)] | None = Field(
        default=None, description="[TOPIC:]P:O[,...]"
    )
    from_timestamp: Annotated[str, Field(max_length=64)] | None = Field(
        default=None, description="RFC 3339"
    )
    to_offset: Annotated[str, Field(max_length=2000)] | None = None
    to_timestamp: Annotated[str, Field(max_length=64)] | None = None


log = get_logger(__name__)


def _position(after: str | None) -> Position | None:
    """The ``after`` of a listing (422 when it is no ``P:O``)."""
    try:
        return None if after is None else parse_position(after)
    except ValueError as exc:
        raise ProblemError(
            422, str(exc), slug=ProblemType.INVALID_REQUEST, title="Invalid request"
        ) from None


def router(  # noqa: C901 - one nested function per route
    resources: Resources, deployments: Sequence[Deployment]
) -> APIRouter:
    api = APIRouter(prefix="/ops", tags=["operations"])
    by_name = {d.name: d for d in deployments}
    dry_runs = {d.name: asyncio.Lock() for d in deployments}
    reader = Depends(requires(resources, OPS_READ))
    anyone = Depends(requires(resources, None))

    def deployment_of(name: str) -> Deployment:
        found = by_name.get(name)
        if found is None:
            known = ", ".join(sorted(by_name))
            raise not_found(f"no consumer deployment {name!r}; known: {known}")
        return found

    def topics_of(name: str) -> Topics:
        try:
            return find_topics(deployments, name)
        except UnknownTopicError as exc:
            raise not_found(str(exc)) from None

    @api.get(
        "/consumers",
        summary="Each deployment's group: state, members, lag and progress per partition.",
        responses=responses(*COMMON),
    )
    async def list_consumers(*, _: Principal = reader) -> list[ConsumerOut]:
        groups = await progress(resources, deployments)
        return [ConsumerOut.model_validate(g.to_json()) for g in groups]

    @api.get(
        "/dead-letters",
        summary="Dead letters of every deployment topic, counted by reason.",
        responses=responses(*COMMON),
    )
    async def dead_letter_summary(*, _: Principal = reader) -> list[DeadLetterTopicOut]:
        return await dead_letter_topics(resources, deployments)

    @api.get(
        "/dead-letters/{topic}",
        summary="The dead letters of one topic (T or T.dlq), oldest first per partition, a page "
        "at a time.",
        responses=responses(*COMMON, 404),
    )
    async def list_dead_letters(
        *,
        topic: str,
        _: Principal = reader,
        reason: Annotated[str | None, Query(max_length=200)] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        after: Annotated[
            str | None,
            Query(
                max_length=40,
                description="PARTITION:OFFSET: the page after this dead letter (`next_after`).",
            ),
        ] = None,
    ) -> DeadLetterList:
        topics = topics_of(topic)
        page, done = await dead_letters(
            resources, topics, reason=reason, limit=limit, after=_position(after)
        )
        return DeadLetterList(
            topic=topics.source,
            dlq_topic=topics.dlq,
            total=page.total,
            dead_letters=[
                DeadLetterOut.model_validate(s.to_json(redriven=s.position in done))
                for s in page.summaries
            ],
            next_after=format_position(page.next_after),
            truncated=page.truncated,
        )

    @api.post(
        "/dead-letters/{topic}/redrive",
        summary="Redrive dead letters to their source topic (dry run by default).",
        responses=responses(*COMMON, 404),
    )
    async def redrive_dead_letters(
        *, topic: str, body: RedriveIn, principal: Principal = anyone
    ) -> RedriveOut:
        needed = OPS_READ if body.dry_run else OPS_REDRIVE
        if not principal.allows(needed):
            raise missing_scope(principal, needed)
        report = await redrive_topic(
            resources, topics_of(topic), reason=body.reason, dry_run=body.dry_run
        )
        return RedriveOut.model_validate(report.to_json())

    @api.post(
        "/consumers/{deployment}/replay-dry-run",
        summary="Replay a range through the deployment's handler in one rolled-back "
        "transaction: what would change per table and what would be dead-lettered.",
        responses=responses(*COMMON, 404, 409, 501),
    )
    async def replay_dry_run(
        *, deployment: str, body: ReplayIn, _: Principal = reader
    ) -> dict[str, Any]:
        d = deployment_of(deployment)
        running = dry_runs[d.name]
        if running.locked():
            raise ProblemError(
                409,
                f"a replay dry run of {d.name!r} is running; retry when it has finished",
                slug=ProblemType.DRY_RUN_BUSY,
                headers={"Retry-After": "10"},
            )
        async with running:
            return await _dry_run(d, body)

    async def _dry_run(d: Deployment, body: ReplayIn) -> dict[str, Any]:
        if d.replay_dry_run is None:
            raise not_found(f"{d.name!r} offers no replay here")
        try:
            start = start_of(
                from_beginning=body.from_beginning,
                from_offset=body.from_offset,
                from_timestamp=body.from_timestamp,
            )
            stop = stop_of(body.to_offset, body.to_timestamp)
            check_order(start, stop)
        except ValueError as exc:
            raise ProblemError(
                422, str(exc)[:300], slug=ProblemType.INVALID_REQUEST, title="Invalid request"
            ) from None
        try:
            report = await d.replay_dry_run(start, stop)
        except ConfigurationError as exc:
            # The dry run acts as the deployment's own role (it runs its handler, rolled back):
            # a login without that grant cannot offer it. Say so instead of a bare 500.
            log.warning("replay dry run not possible", deployment=d.name, error=str(exc))
            raise ProblemError(
                501,
                f"this API's database login may not run {d.name!r}'s handler: replay dry runs "
                "need the deployment's role granted to it (see "
                "docs/howto/secure/api-roles-and-proxy.md)",
                slug=ProblemType.DRY_RUN_NOT_CONFIGURED,
            ) from None
        except ValueError as exc:  # a range naming partitions the topics do not have
            raise ProblemError(
                422, str(exc)[:300], slug=ProblemType.INVALID_REQUEST, title="Invalid request"
            ) from None
        return report.to_json()

    return api
