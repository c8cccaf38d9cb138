"""Setting and removing spend budgets (the command side; reads: producers/work/domain/
budgets.py): an org's, a project's, a thread's (its own calls and its child threads') or a
model route's.

A changed budget — raised, lowered, another period, removed — resumes the items it parked in
the same transaction: the next claim takes them if every budget of their call now allows it,
and parks them again (naming the scope) if one still does not. Who changed it is recorded
(``updated_by``: the acting principal).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from uuid import UUID

import asyncpg

from producers.work.domain.budgets import BudgetView, Period, Scope, ScopeKind, scope_budgets
from producers.work.domain.identity import check_identifier
from producers.work.repository import CommandRepository
from spectral.db.connect import guarded
from spectral.db.queries import load_queries

_SQL = load_queries(Path(__file__).with_name("queries.sql"))

ROUTE_MAX_LENGTH = 200


@dataclass(frozen=True)
class BudgetChange:
    scope: Scope
    budget: BudgetView | None
    """The budget now (None once removed), with the period's spend."""
    resumed: int
    """Parked items resumed by the change."""

    @property
    def org_id(self) -> str | None:
        return self.scope[1] if self.scope[0] is ScopeKind.ORG else None


def check_scope(kind: ScopeKind, scope_id: str) -> Scope:
    """The scope, its id checked (and a thread id in its canonical form)."""
    if kind in (ScopeKind.ORG, ScopeKind.PROJECT):
        check_identifier(scope_id, f"{kind.value} id")
        return (kind, scope_id)
    if kind is ScopeKind.THREAD:
        try:
            return (kind, str(UUID(scope_id)))
        except ValueError:
            raise ValueError(f"thread id {scope_id!r} is not a UUID") from None
    if not 1 <= len(scope_id) <= ROUTE_MAX_LENGTH or not all(
        c.isprintable() and not c.isspace() for c in scope_id
    ):
        raise ValueError(
            f"route {scope_id!r} must be 1-{ROUTE_MAX_LENGTH} printable characters, no spaces"
        )
    return (kind, scope_id)


def _check_limits(token_limit: int | None, cost_limit: Decimal | None) -> None:
    if token_limit is None and cost_limit is None:
        raise ValueError("a budget needs a token limit, a cost limit or both")
    if token_limit is not None and token_limit < 0:
        raise ValueError("a token limit cannot be negative")
    if cost_limit is not None and (not cost_limit.is_finite() or cost_limit < 0):
        raise ValueError("a cost limit must be a number >= 0")


def _org(org_or_scope: str | Scope) -> Scope:
    if isinstance(org_or_scope, str):
        return check_scope(ScopeKind.ORG, org_or_scope)
    return check_scope(*org_or_scope)


class BudgetCommands:
    """Budgets over a pool whose sessions act as spectral_producer. A scope is given as
    ``(kind, id)``; a plain string is an org id."""

    def __init__(self, pool: asyncpg.Pool, *, repository: CommandRepository | None = None) -> None:
        self._pool = pool
        self._repo = repository or CommandRepository()

    async def set(
        self,
        scope: str | Scope,
        period: Period,
        *,
        token_limit: int | None = None,
        cost_limit: Decimal | None = None,
        requested_by: str | None = None,
    ) -> BudgetChange:
        kind, scope_id = _org(scope)
        _check_limits(token_limit, cost_limit)

        async def run() -> BudgetChange:
            async with self._pool.acquire() as conn, conn.transaction():
                await self._repo.act_as(conn, requested_by)
                if kind is ScopeKind.ORG:
                    await conn.execute(
                        _SQL["upsert_budget"], scope_id, period.value, token_limit, cost_limit
                    )
                else:
                    await conn.execute(
                        _SQL["upsert_scope_budget"],
                        kind.value,
                        scope_id,
                        period.value,
                        token_limit,
                        cost_limit,
                    )
                resumed = len(await conn.fetch(_SQL["resume_scope"], kind.value, scope_id))
                view = (await scope_budgets(conn, [(kind, scope_id)])).get((kind, scope_id))
            return BudgetChange((kind, scope_id), view, resumed)

        return await guarded("set budget", run)

    async def remove(
        self, scope: str | Scope, *, requested_by: str | None = None
    ) -> BudgetChange | None:
        """Remove the budget (the scope is no longer limited); None when it had none."""
        kind, scope_id = _org(scope)

        async def run() -> BudgetChange | None:
            async with self._pool.acquire() as conn, conn.transaction():
                await self._repo.act_as(conn, requested_by)
                if kind is ScopeKind.ORG:
                    gone = await conn.fetchval(_SQL["delete_budget"], scope_id)
                else:
                    gone = await conn.fetchval(_SQL["delete_scope_budget"], kind.value, scope_id)
                if gone is None:
                    return None
                resumed = len(await conn.fetch(_SQL["resume_scope"], kind.value, scope_id))
            return BudgetChange((kind, scope_id), None, resumed)

        return await guarded("remove budget", run)

    async def get(self, scope: str | Scope) -> BudgetView | None:
        key = _org(scope)

        async def run() -> BudgetView | None:
            async with self._pool.acquire() as conn:
                return (await scope_budgets(conn, [key])).get(key)

        return await guarded("read budget", run)

    async def all(self, kind: ScopeKind | None = None) -> list[BudgetView]:
        """Every budget (of one kind when given), org budgets first."""

        async def run() -> list[BudgetView]:
            async with self._pool.acquire() as conn:
                views = (await scope_budgets(conn)).values()
            return [v for v in views if kind is None or v.kind is kind]

        return await guarded("read budgets", run)
