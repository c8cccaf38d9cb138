"""Read tools over MCP for durable work (ADR-035): a thread with its child summary and items,
its execution reconstructed from the ledger, and a project's threads (scope ``work:read``)."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from producers.work.api import project_threads_page
from producers.work.schemas import HistoryOut, ThreadOut
from spectral.auth.scopes import Scope
from spectral.mcp.tools import Caller, as_json, parse_uuid, tool_errors
from spectral.work.history import reconstruct
from spectral.work.identity import check_identifier
from spectral.work.read import WorkReader


def register(server: MCPServer, caller: Caller) -> None:
    resources = caller.resources

    @server.tool(
        description="A work thread (ADR-035): status, target, created/closed, its "
        "work items and, for a generate-all orchestration, child_summary (children "
        "by status) and the children. Needs work:read."
    )
    @tool_errors
    async def get_thread(thread_id: str) -> dict[str, Any]:
        await caller.require(Scope.WORK_READ)
        view = await WorkReader(resources.operator).thread(parse_uuid(thread_id, "thread_id"))
        if view is None:
            raise ToolError(f"no thread {thread_id}")
        return as_json(ThreadOut.of_view(view))

    @server.tool(
        description="The ledger history of a thread (and its children): every "
        "prompt, response, parse report, mutation report and error in order, each "
        "item's outcome and paid calls, and whether the ledger is consistent. Needs "
        "work:read."
    )
    @tool_errors
    async def get_thread_history(thread_id: str) -> dict[str, Any]:
        await caller.require(Scope.WORK_READ)
        tid = parse_uuid(thread_id, "thread_id")
        entries = await WorkReader(resources.operator).thread_ledger(tid)
        if entries is None:
            raise ToolError(f"no thread {thread_id}")
        return as_json(HistoryOut.of(tid, entries, reconstruct(entries)))

    @server.tool(
        description="The threads of a project, newest first; active=true keeps open "
        "and running ones. Pass next_cursor for the next page. Needs work:read."
    )
    @tool_errors
    async def list_project_threads(
        project_id: str, active: bool = False, limit: int = 50, cursor: str | None = None
    ) -> dict[str, Any]:
        await caller.require(Scope.WORK_READ)
        check_identifier(project_id, "project id")
        page = await project_threads_page(
            resources, project_id, active=active, limit=max(1, min(limit, 200)), cursor=cursor
        )
        return as_json(page)
