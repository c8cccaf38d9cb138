"""Durable LLM work as a plugin of spectral: its event types, ``spectral work`` and ``spectral
threads``, its HTTP API, console pages and MCP tools, the scopes that guard them and its
settings. Its executor is a plugin of its own (consumers/work_executor/plugin.py)."""

from __future__ import annotations

from typing import Final

from spectral.extend import Command, ConsolePage, NavEntry, Plugin, Router, Scope, Tools

WORK_READ: Final = Scope("work:read", "observe threads, their ledger history and documents")
WORK_SUBMIT: Final = Scope(
    "work:submit", "submit work commands and put documents", implies=(WORK_READ.name,)
)
WORK_CANCEL: Final = Scope(
    "work:cancel", "cancel threads and generate-all trees", implies=(WORK_READ.name,)
)
WORK_BUDGET: Final = Scope(
    "work:budget", "set and remove the spend budgets of orgs", implies=(WORK_READ.name,)
)

PLUGIN: Final = Plugin(
    events=(".domain.events:SPECS",),
    commands=(
        Command("work", "Durable LLM work: documents and commands (ADR-035).", ".cli:app"),
        Command("threads", "Observe threads and their execution ledger.", ".cli:threads_app"),
    ),
    routers=(
        Router(
            ".api:router",
            description="**Durable work** (ADR-035 §12). Commands take a `priority` (`high`, "
            "`normal`, `low`; ageing keeps low ones from starving) and an `org_id` (its "
            "budget, its fair share of the executors). Items are `queued`, `claimed`, "
            "`running`, `failed` (waiting for a retry), `parked` (waiting for a budget of its "
            "org, project, thread or model route: not failed, nothing paid; `park_reason` "
            "names it), or ended: `applied`, "
            "`dead_letter`, `canceled`. `POST /threads/{id}/cancel` ends waiting items at once "
            "and lets a call in flight finish (its answer is recorded, not applied).",
        ),
    ),
    pages=(
        ConsolePage(
            ".console:router",
            nav=(
                NavEntry("threads", "Threads", "/threads", 30),
                NavEntry("budgets", "Budgets", "/budgets", 40),
            ),
        ),
    ),
    tools=(
        Tools(
            ".tools:register",
            instructions="Observe durable LLM work (ADR-035): get_thread, get_thread_history, "
            "list_project_threads.",
        ),
    ),
    scopes=(WORK_READ, WORK_SUBMIT, WORK_CANCEL, WORK_BUDGET),
    settings=".domain.settings:WorkSettings",
    retention=(".domain.retention:tasks",),
)
