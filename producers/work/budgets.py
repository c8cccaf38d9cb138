"""Setting and removing the spend budget of an org (the command side; reads: producers/work/domain/
budgets.py).

A changed budget — raised, lowered, another period, removed — resumes the org's parked items
in the same transaction: the next claim takes them if the budget now allows a call, and parks
them again (with the reason) if it still does not. Who changed it is recorded
(``updated_by``: the acting principal).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import asyncpg

from producers.work.domain.budgets import BudgetView, Period, budgets
from producers.work.domain.identity import check_identifier
from producers.work.repository import CommandRepository
from spectral.db.connect import guarded
from spectral.db.queries import load_queries

_SQL = load_queries(Path(__file__).with_name("queries.sql"))


@dataclass(frozen=True)
class BudgetChange:
    org_id: str
    budget: BudgetView | None
    """The budget now (None once removed), with the period's spend."""
    resumed: int
    """Parked items resumed by the change."""


def _check_limits(token_limit: int | None, cost_limit: Decimal | None) -> None:
    if token_limit is None and cost_limit is None:
        raise ValueError("a budget needs a token limit, a cost limit or both")
    if token_limit is not None and token_limit < 0:
        raise ValueError("a token limit cannot be negative")
    if cost_limit is not None and (not cost_limit.is_finite() or cost_limit < 0):
        raise ValueError("a cost limit must be a number >= 0")


class BudgetCommands:
    """Budgets over a pool whose sessions act as spectral_producer."""

    def __init__(self, pool: asyncpg.Pool, *, repository: CommandRepository | None = None) -> None:
        self._pool = pool
        self._repo = repository or CommandRepository()

    async def set(
        self,
        org_id: str,
        period: Period,
        *,
        token_limit: int | None = None,
        cost_limit: Decimal | None = None,
        requested_by: str | None = None,
    ) -> BudgetChange:
        check_identifier(org_id, "org id")
        _check_limits(token_limit, cost_limit)

        async def run() -> BudgetChange:
            async with self._pool.acquire() as conn, conn.transaction():
                await self._repo.act_as(conn, requested_by)
                await conn.execute(
                    _SQL["upsert_budget"], org_id, period.value, token_limit, cost_limit
                )
                resumed = len(await conn.fetch(_SQL["resume_org"], org_id))
                view = (await budgets(conn, [org_id])).get(org_id)
            return BudgetChange(org_id, view, resumed)

        return await guarded("set budget", run)

    async def remove(self, org_id: str, *, requested_by: str | None = None) -> BudgetChange | None:
        """Remove the budget (the org is no longer limited); None when it had none."""
        check_identifier(org_id, "org id")

        async def run() -> BudgetChange | None:
            async with self._pool.acquire() as conn, conn.transaction():
                await self._repo.act_as(conn, requested_by)
                if await conn.fetchval(_SQL["delete_budget"], org_id) is None:
                    return None
                resumed = len(await conn.fetch(_SQL["resume_org"], org_id))
            return BudgetChange(org_id, None, resumed)

        return await guarded("remove budget", run)

    async def get(self, org_id: str) -> BudgetView | None:
        check_identifier(org_id, "org id")

        async def run() -> BudgetView | None:
            async with self._pool.acquire() as conn:
                return (await budgets(conn, [org_id])).get(org_id)

        return await guarded("read budget", run)

    async def all(self) -> list[BudgetView]:
        async def run() -> list[BudgetView]:
            async with self._pool.acquire() as conn:
                return list((await budgets(conn)).values())

        return await guarded("read budgets", run)
