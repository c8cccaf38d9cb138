"""The triage inbox as a plugin of spectral: the ``rule-candidates`` deployment, ``spectral
triage``, its HTTP API, console pages and MCP tools, and the scopes that guard them."""

from __future__ import annotations

from typing import Final

from spectral.extend import (
    Command,
    ConsolePage,
    Deployment,
    NavEntry,
    Plugin,
    Router,
    Scope,
    Tools,
)

TRIAGE_READ: Final = Scope(
    "triage:read", "list failure clusters, read one with its evidence and audit trail"
)
TRIAGE_WRITE: Final = Scope(
    "triage:write",
    "triage a cluster: status, assignee, notes, soft delete",
    implies=(TRIAGE_READ.name,),
)

PLUGIN: Final = Plugin(
    deployments=(Deployment("rule-candidates", ".deployment:build"),),
    commands=(
        Command(
            "triage",
            "Triage failure clusters: list, show and set status, assignee and notes.",
            ".cli:app",
        ),
    ),
    routers=(
        Router(
            ".api:router",
            description="**Triage** (ADR-057 D5). `GET /clusters/{id}` returns an `ETag`; "
            "`PATCH` needs it in `If-Match` (412 when the cluster changed meanwhile, 428 "
            "without it).",
        ),
    ),
    pages=(
        ConsolePage(
            ".console:router", nav=(NavEntry("clusters", "Triage inbox", "/clusters", 10),)
        ),
    ),
    tools=(
        Tools(
            ".tools:register",
            instructions="Triage failure clusters (ADR-057): list_failure_clusters, "
            "get_cluster_detail, then triage_cluster with the triage_version you read as "
            "expected_version.",
        ),
    ),
    scopes=(TRIAGE_READ, TRIAGE_WRITE),
    retention=(".retention:tasks",),
)
