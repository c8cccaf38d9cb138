"""Read tools over MCP for consumer operations: dead letters by reason per deployment topic,
the dead letters of one topic, and each deployment's lag (scope ``ops:read``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from spectral.auth.scopes import OPS_READ
from spectral.dlq.records import format_position, parse_position
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
        await caller.require(OPS_READ)
        found = await dead_letter_topics(resources, deployments)
        return {"topics": [t.model_dump(mode="json") for t in found]}

    @server.tool(
        description="The dead letters of one deployment topic (T or T.dlq), oldest first, a "
        "page at a time (limit: 1-1000): reason, detail, consumer, source offset, earlier "
        "failures, redriven. `total` counts the topic's dead letters; when `next_after` is not "
        "null, call again with after=next_after for the next page (`truncated`: the read limit "
        "stopped the page before it filled). Needs ops:read."
    )
    @tool_errors
    async def list_dead_letters(
        topic: str, reason: str | None = None, limit: int = 50, after: str | None = None
    ) -> dict[str, Any]:
        await caller.require(OPS_READ)
        try:
            topics = find_topics(deployments, topic)
            position = None if after is None else parse_position(after)
        except (UnknownTopicError, ValueError) as exc:
            raise ToolError(str(exc)) from None
        page, done = await dead_letters(
            resources, topics, reason=reason, limit=min(max(1, limit), 1000), after=position
        )
        return {
            "topic": topics.source,
            "total": page.total,
            "dead_letters": [s.to_json(redriven=s.position in done) for s in page.summaries],
            "next_after": format_position(page.next_after),
            "truncated": page.truncated,
        }

    @server.tool(
        description="Each consumer deployment's group: state, members, and per partition the "
        "committed offset, end offset, lag and the time of the last record committed past. "
        "Needs ops:read."
    )
    @tool_errors
    async def consumer_lag() -> dict[str, Any]:
        await caller.require(OPS_READ)
        return {"consumers": [g.to_json() for g in await progress(resources, deployments)]}
