"""Read tools over MCP for consumer operations: dead letters by reason per deployment topic,
the dead letters of one topic, and each deployment's lag (scope ``ops:read``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import asyncpg
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from spectral.auth.scopes import Scope
from spectral.dlq.records import Topics, read_dead_letters
from spectral.dlq.repository import RedriveRepository
from spectral.mcp.tools import Caller, tool_errors
from spectral.ops.api import Deployment, summarize
from spectral.ops.lag import group_progress


def register(server: MCPServer, caller: Caller, deployments: Sequence[Deployment]) -> None:
    resources = caller.resources

    async def redriven(dlq_topic: str) -> set[tuple[int, int]]:
        async with resources.operator.acquire() as conn:
            return await RedriveRepository(cast("asyncpg.Connection", conn)).redriven(dlq_topic)

    @server.tool(
        description="Dead letters of every consumer deployment's topics, counted by "
        "reason (and how many were redriven). Needs ops:read."
    )
    @tool_errors
    async def dead_letter_summary() -> dict[str, Any]:
        await caller.require(Scope.OPS_READ)
        out = []
        for d in deployments:
            for topic in d.topics:
                topics = Topics.of(topic)
                records = await read_dead_letters(
                    resources.settings, resources.kafka_bootstrap, topics.dlq
                )
                out.append(summarize(d.name, topics, records, await redriven(topics.dlq)))
        return {"topics": [t.model_dump(mode="json") for t in out]}

    @server.tool(
        description="The dead letters of one deployment topic (T or T.dlq), oldest "
        "first: reason, detail, consumer, source offset, earlier failures, redriven. "
        "Needs ops:read."
    )
    @tool_errors
    async def list_dead_letters(
        topic: str, reason: str | None = None, limit: int = 50
    ) -> dict[str, Any]:
        await caller.require(Scope.OPS_READ)
        topics = Topics.of(topic)
        if not any(topics.source in d.topics for d in deployments):
            raise ToolError("not a topic of any consumer deployment (give T or T.dlq)")
        records = await read_dead_letters(resources.settings, resources.kafka_bootstrap, topics.dlq)
        done = await redriven(topics.dlq)
        chosen = [r for r in records if reason is None or r.reason == reason]
        return {
            "topic": topics.source,
            "total": len(chosen),
            "dead_letters": [
                r.summary_json(redriven=r.position in done) for r in chosen[: max(1, limit)]
            ],
        }

    @server.tool(
        description="Each consumer deployment's group: state, members, and per "
        "partition the committed offset, end offset, lag and the time of the last "
        "record committed past. Needs ops:read."
    )
    @tool_errors
    async def consumer_lag() -> dict[str, Any]:
        await caller.require(Scope.OPS_READ)
        groups = [
            await group_progress(
                resources.settings,
                resources.kafka_bootstrap,
                deployment=d.name,
                group=d.group,
                topics=d.topics,
            )
            for d in deployments
        ]
        return {"consumers": [g.to_json() for g in groups]}
