"""ADR-057 D5's Ops Agent tools over MCP: ``list_failure_clusters``, ``get_cluster_detail``,
``triage_cluster`` — the same reads and writes as the HTTP API (consumers/rule_candidates/api.py),
as the operator role, with the same scopes; changes are audited under the token's principal."""

from __future__ import annotations

from typing import Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from consumers.rule_candidates.api import (
    NOTES_MAX_CHARS,
    ClusterDetail,
    apply_triage,
    decode_page_cursor,
    load_detail,
    load_page,
)
from consumers.rule_candidates.plugin import TRIAGE_READ, TRIAGE_WRITE
from consumers.rule_candidates.transitions import Status, TransitionError, parse_status
from consumers.rule_candidates.triage import (
    ClusterNotFoundError,
    ListFilter,
    Severity,
    Sort,
    TriageChange,
    VersionConflictError,
)
from spectral.mcp.tools import Caller, as_json, parse_uuid, tool_errors


def register(server: MCPServer, caller: Caller) -> None:
    resources = caller.resources

    @server.tool(
        description="List failure clusters (the triage inbox): most severe first by "
        "default. Filters: status (pending|in_review|dismissed|resolved), severity "
        "(low|medium|high), workspace_id, assignee, resurfaced (came back after its "
        "last triage). sort: severity|newest|oldest|failures|signaled. Pass the "
        "returned next_cursor to get the next page. Needs triage:read."
    )
    @tool_errors
    async def list_failure_clusters(  # noqa: PLR0917 - one parameter per filter
        status: str | None = None,
        severity: str | None = None,
        workspace_id: str | None = None,
        assignee: str | None = None,
        resurfaced: bool = False,
        sort: str = "severity",
        limit: int = 50,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        await caller.require(TRIAGE_READ)
        order = Sort(sort)
        where = ListFilter(
            status=parse_status(status) if status else None,
            severity=Severity(severity) if severity else None,
            workspace_id=parse_uuid(workspace_id, "workspace_id") if workspace_id else None,
            assignee=parse_uuid(assignee, "assignee") if assignee else None,
            resurfaced_only=resurfaced,
            limit=max(1, min(limit, 200)),
            sort=order,
            after=decode_page_cursor(resources.cursors, cursor, order),
        )
        return as_json(await load_page(resources, where))

    @server.tool(
        description="One failure cluster: its snapshot, evidence bundle, suggested "
        "rule stub, triage state (status, assignee, notes, triage_version, the "
        "statuses it may move to) and the audit trail of every triage change. "
        "Needs triage:read."
    )
    @tool_errors
    async def get_cluster_detail(cluster_id: str) -> dict[str, Any]:
        await caller.require(TRIAGE_READ)
        try:
            detail = await load_detail(resources, parse_uuid(cluster_id, "cluster_id"))
        except ClusterNotFoundError as exc:
            raise ToolError(str(exc)) from None
        return as_json(ClusterDetail.of_detail(detail))

    @server.tool(
        description="Triage a failure cluster: set its status (pending -> in_review "
        "| dismissed | resolved; in_review -> pending | dismissed | resolved; "
        "dismissed or resolved -> pending | in_review), replace its notes ('' clears "
        "them) and/or its assignee (a user id; '' clears it). expected_version is "
        "required: the triage_version you read (the change is refused if someone else "
        "changed the cluster meanwhile), or '*' to overwrite whatever it is now. "
        "Recorded in the audit trail. Needs triage:write."
    )
    @tool_errors
    async def triage_cluster(
        cluster_id: str,
        expected_version: int | Literal["*"],
        status: str | None = None,
        notes: str | None = None,
        assigned_to: str | None = None,
    ) -> dict[str, Any]:
        principal = await caller.require(TRIAGE_WRITE)
        if notes is not None and len(notes) > NOTES_MAX_CHARS:
            raise ToolError(f"notes are limited to {NOTES_MAX_CHARS} characters")
        if notes is not None and "\x00" in notes:
            raise ToolError("notes must not contain NUL (U+0000)")
        target: Status | None = parse_status(status) if status else None
        change = TriageChange(
            status=target,
            change_assignee=assigned_to is not None,
            assignee=parse_uuid(assigned_to, "assigned_to") if assigned_to else None,
            change_notes=notes is not None,
            notes=notes or None,
        )
        if change.is_empty:
            raise ToolError("nothing to change: give status, notes or assigned_to")
        try:
            detail = await apply_triage(
                resources,
                parse_uuid(cluster_id, "cluster_id"),
                change,
                expected_version=None if expected_version == "*" else expected_version,
                actor=principal.actor,
            )
        except (ClusterNotFoundError, VersionConflictError, TransitionError) as exc:
            raise ToolError(str(exc)) from None
        return as_json(ClusterDetail.of_detail(detail))
