"""Spend budgets per org (read side, shared by the executor's claims and the surfaces).

A budget limits what an org's work may spend in a period — ``hour``, ``day``, ``week``,
``month`` (UTC calendar periods) or ``total`` — in tokens and/or cost (the unit of the prices
in the provider limits, spectral/llm/limits.py). No budget row: no limit. What an org spent in
the current period is read from ``work.spend`` (one row per attempt, reserved before the call
and settled from the usage its response reported; see migration 0011's comments).
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


class Period(StrEnum):
    HOUR = "hour"
    DAY = "day"
    WEEK = "week"
    MONTH = "month"
    TOTAL = "total"


@dataclass(frozen=True)
class BudgetView:
    org_id: str
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
    """Items of the org parked for this budget."""
    unknown: int = 0
    """Reservations of calls whose outcome is unknown (the worker died or the call timed out
    after the request left): counted in full, never re-paid silently."""
    unknown_tokens: int = 0
    """The tokens those reservations hold."""
    overrun_tokens: int = 0
    """Tokens providers billed beyond the reservations of the org's calls in the period."""

    @property
    def exhausted(self) -> bool:
        return (self.token_limit is not None and self.tokens >= self.token_limit) or (
            self.cost_limit is not None and self.cost >= self.cost_limit
        )


async def budgets(conn: Conn, orgs: Sequence[str] | None = None) -> dict[str, BudgetView]:
    """The budgets of ``orgs`` (every budget when None) with their spend in the period."""
    rows = await conn.fetch(_SQL["budgets_with_spend"], list(orgs) if orgs is not None else None)
    return {
        row["org_id"]: BudgetView(
            org_id=row["org_id"],
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
    }
