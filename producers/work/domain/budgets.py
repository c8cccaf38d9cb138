"""Spend budgets per scope (read side, shared by the executor's claims and the surfaces).

A budget limits what a scope's work may spend in a period — ``hour``, ``day``, ``week``,
``month`` (UTC calendar periods) or ``total`` — in tokens and/or cost (the unit of the prices
in the provider limits, spectral/llm/limits.py). No budget row: no limit. Scopes nest: a call
counts against its org, its project, its thread (and the thread's parent thread, a
generate-all) and its model route, and it is admitted only if every one of those budgets has
room for it (consumers/work_executor/schedule.py). What a scope spent in the current period is
what its ``work.spend`` rows count (one row per attempt, reserved before the call in every
scope it belongs to, and settled from the usage its response reported; migrations 0014, 0022,
0027), read from running totals per scope and hour/day bucket that the transactions writing
spend keep (migration 0031: ``work.spend_changes``, folded by each claim into
``work.spend_totals``), so a read costs a few rows per scope whatever the period's volume.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from pathlib import Path

from producers.work.domain.types import Conn
from spectral.db.queries import load_queries

_SQL = load_queries(Path(__file__).with_name("queries.sql"))


class ScopeKind(StrEnum):
    """The kinds of budget scope, outermost first (a call belongs to one scope of each kind it
    has: an org, a project, a thread and its parent thread, a model route)."""

    ORG = "org"
    PROJECT = "project"
    THREAD = "thread"
    ROUTE = "route"


Scope = tuple[ScopeKind, str]
"""(kind, id): ("org", org id), ("project", project id), ("thread", thread UUID as text),
("route", model)."""


def scope_name(scope: Scope) -> str:
    """How logs, park reasons and surfaces name a scope: ``kind:id``."""
    return f"{scope[0].value}:{scope[1]}"


class Period(StrEnum):
    HOUR = "hour"
    DAY = "day"
    WEEK = "week"
    MONTH = "month"
    TOTAL = "total"


@dataclass(frozen=True)
class BudgetView:
    scope_id: str
    period: Period
    token_limit: int | None
    cost_limit: Decimal | None
    updated_at: datetime
    updated_by: str
    period_start: datetime | None
    """None for ``total`` (it never resets)."""
    tokens: int
    cost: Decimal
    outstanding: int
    """Reservations of calls not settled yet (counted in full until they are)."""
    parked: int
    """Items parked by this budget."""
    unknown: int = 0
    """Reservations of calls whose outcome is unknown (the worker died or the call timed out
    after the request left): counted in full, never re-paid silently."""
    unknown_tokens: int = 0
    """The tokens those reservations hold."""
    overrun_tokens: int = 0
    """Tokens providers billed beyond the reservations of the scope's calls in the period."""
    kind: ScopeKind = ScopeKind.ORG

    @property
    def scope(self) -> Scope:
        return (self.kind, self.scope_id)

    @property
    def org_id(self) -> str | None:
        """The org of an org budget (None for the other kinds)."""
        return self.scope_id if self.kind is ScopeKind.ORG else None

    @property
    def exhausted(self) -> bool:
        return (self.token_limit is not None and self.tokens >= self.token_limit) or (
            self.cost_limit is not None and self.cost >= self.cost_limit
        )


async def budgets(conn: Conn, orgs: Sequence[str] | None = None) -> dict[str, BudgetView]:
    """The org budgets of ``orgs`` (every org budget when None) with their spend in the
    period."""
    if orgs is None:
        found = await scope_budgets(conn)
        return {v.scope_id: v for v in found.values() if v.kind is ScopeKind.ORG}
    found = await scope_budgets(conn, [(ScopeKind.ORG, org) for org in orgs])
    return {v.scope_id: v for v in found.values()}


async def scope_budgets(
    conn: Conn, scopes: Sequence[Scope] | None = None, *, from_ledger: bool = False
) -> dict[Scope, BudgetView]:
    """The budgets of ``scopes`` (every budget when None) with their scope's spend in the
    period; a scope without a budget is absent (not limited). Read from the running totals
    (a few rows per scope, whatever the period's volume); ``from_ledger`` sums the period's
    spend rows themselves instead — the same figures, at a cost that grows with the period
    (an audit of the totals)."""
    kinds = [kind.value for kind, _ in scopes] if scopes is not None else None
    ids = [scope_id for _, scope_id in scopes] if scopes is not None else None
    query = _SQL["budgets_from_ledger" if from_ledger else "budgets_with_spend"]
    rows = await conn.fetch(query, kinds, ids)
    views = (
        BudgetView(
            kind=ScopeKind(row["scope_kind"]),
            scope_id=row["scope_id"],
            period=Period(row["period"]),
            token_limit=row["token_limit"],
            cost_limit=row["cost_limit"],
            updated_at=row["updated_at"],
            updated_by=row["updated_by"],
            period_start=None if row["period"] == Period.TOTAL else row["period_start"],
            tokens=row["tokens"],
            cost=row["cost"],
            outstanding=row["outstanding"],
            parked=row["parked"],
            unknown=row["unknown"],
            unknown_tokens=row["unknown_tokens"],
            overrun_tokens=row["overrun_tokens"],
        )
        for row in rows
    )
    return {view.scope: view for view in views}
