"""Read tools over MCP for consumer operations: dead letters by reason per deployment topic,
the dead letters of one topic, and each deployment's lag (scope ``ops:read``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from spectral.auth.scopes import Scope
from spectral.mcp.tools import Caller, tool_errors
from spectral.ops.views import (
    Deployment,
    UnknownTopicError,
    dead_letter_topics,
    dead_letters,
    find_topics,
    progress,
)


def register(server: MCPServer, caller: Caller, deployments: Sequence[Deployment]) -> None:
    resources = caller.resources

    @server.tool(
        description="Dead letters of every consumer deployment's topics, counted by reason (and "
        "how many were redriven). Needs ops:read."
    )
    @tool_errors
    async def dead_letter_summary() -> dict[str, Any]:
        await caller.require(Scope.OPS_READ)
        found = await dead_letter_topics(resources, deployments)
        return {"topics": [t.model_dump(mode="json") for t in found]}

    @server.tool(
        description="The dead letters of one deployment topic (T or T.dlq), oldest first: "
        "reason, detail, consumer, source offset, earlier failures, redriven. Needs ops:read."
    )
    @tool_errors
    async def list_dead_letters(
        topic: str, reason: str | None = None, limit: int = 50
    ) -> dict[str, Any]:
        await caller.require(Scope.OPS_READ)
        try:
            topics = find_topics(deployments, topic)
        except UnknownTopicError as exc:
            raise ToolError(str(exc)) from None
        chosen, done = await dead_letters(resources, topics, reason)
        return {
            "topic": topics.source,
            "total": len(chosen),
            "dead_letters": [
                r.summary_json(redriven=r.position in done) for r in chosen[: max(1, limit)]
            ],
        }

    @server.tool(
        description="Each consumer deployment's group: state, members, and per partition the "
        "committed offset, end offset, lag and the time of the last record committed past. "
        "Needs ops:read."
    )
    @tool_errors
    async def consumer_lag() -> dict[str, Any]:
        await caller.require(Scope.OPS_READ)
        return {"consumers": [g.to_json() for g in await progress(resources, deployments)]}
