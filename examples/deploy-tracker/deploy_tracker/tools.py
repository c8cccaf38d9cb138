"""The plugin's MCP tool (declared in plugin.py): ``deploy_outcomes``, guarded by the plugin's
own scope like its HTTP route."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

from deploy_tracker.outcomes import outcomes
from deploy_tracker.plugin import DEPLOYS_READ
from spectral.extend import Caller


def register(server: MCPServer, caller: Caller) -> None:
    @server.tool(
        description="Deploys per service and outcome (service: one service only). "
        "Needs deploys:read."
    )
    async def deploy_outcomes(service: str | None = None) -> list[dict[str, Any]]:
        await caller.require(DEPLOYS_READ)
        async with caller.resources.operator.acquire() as conn:
            return [o.model_dump(mode="json") for o in await outcomes(conn, service)]
