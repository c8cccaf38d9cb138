"""Tools over MCP for durable work (ADR-035): a thread with its child summary and items, its
execution reconstructed from the ledger, a project's threads, an org's budget and any scope's
(scope ``work:read``); cancelling a thread (scope ``work:cancel``)."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from producers.work.api import project_threads_page
from producers.work.budgets import BudgetCommands, check_scope
from producers.work.cancel import UnknownThreadError, cancel_thread
from producers.work.domain.budgets import ScopeKind
from producers.work.domain.history import reconstruct
from producers.work.domain.identity import check_identifier
from producers.work.domain.read import WorkReader
from producers.work.plugin import WORK_CANCEL, WORK_READ
from producers.work.schemas import BudgetOut, CancelResponse, HistoryOut, ThreadOut
from spectral.mcp.tools import Caller, as_json, parse_uuid, tool_errors


def register(server: MCPServer, caller: Caller) -> None:  # noqa: C901 - a function per tool
    resources = caller.resources

    @server.tool(
        description="A work thread (ADR-035): status, target, created/closed, its "
        "work items and, for a generate-all orchestration, child_summary (children "
        "by status) and the children. Needs work:read."
    )
    @tool_errors
    async def get_thread(thread_id: str) -> dict[str, Any]:
        await caller.require(WORK_READ)
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
        await caller.require(WORK_READ)
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
        await caller.require(WORK_READ)
        check_identifier(project_id, "project id")
        page = await project_threads_page(
            resources, project_id, active=active, limit=max(1, min(limit, 200)), cursor=cursor
        )
        return as_json(page)

    @server.tool(
        description="Cancel a work thread (a generate-all: its whole tree). Waiting items end "
        "canceled without a paid call; an item whose call is in flight records its answer and "
        "does not apply it; the thread closes canceled. Idempotent. Needs work:cancel."
    )
    @tool_errors
    async def cancel_work_thread(thread_id: str, reason: str | None = None) -> dict[str, Any]:
        principal = await caller.require(WORK_CANCEL)
        try:
            result = await cancel_thread(
                resources.producer,
                parse_uuid(thread_id, "thread_id"),
                reason=reason,
                requested_by=principal.actor,
            )
        except UnknownThreadError:
            raise ToolError(f"no thread {thread_id}") from None
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        return as_json(CancelResponse.of(result))

    @server.tool(
        description="An org's spend budget: its limits per period, what it spent in the current "
        "period (settled usage plus reservations outstanding) and how many of its items are "
        "parked waiting for budget. Needs work:read."
    )
    @tool_errors
    async def get_org_budget(org_id: str) -> dict[str, Any]:
        await caller.require(WORK_READ)
        check_identifier(org_id, "org id")
        view = await BudgetCommands(resources.operator).get(org_id)
        if view is None:
            raise ToolError(f"org {org_id} has no budget (its work is not limited)")
        return as_json(BudgetOut.of(view))

    @server.tool(
        description="The spend budget of any scope: scope_kind org, project, thread (its calls "
        "and its child threads') or route (a model route), and its id. Its limits per period, "
        "what the scope spent in the current period and how many items this budget parked. A "
        "call is admitted only if every budget of its scopes has room. Needs work:read."
    )
    @tool_errors
    async def get_budget(scope_kind: str, scope_id: str) -> dict[str, Any]:
        await caller.require(WORK_READ)
        try:
            scope = check_scope(ScopeKind(scope_kind), scope_id)
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        view = await BudgetCommands(resources.operator).get(scope)
        if view is None:
            raise ToolError(f"{scope_kind} {scope_id} has no budget (its work is not limited)")
        return as_json(BudgetOut.of(view))
