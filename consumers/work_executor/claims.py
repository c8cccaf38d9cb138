"""The claim transaction: which waiting items this executor leases now (ADR-0023, ADR-0008's
SKIP LOCKED pool), fairly, within the provider limits and the org budgets (schedule.py decides;
this module reads and writes).

One transaction, under the scheduler's advisory lock (every executor's claims are serialised,
so the counts decided on are exact across replicas — a claim takes a few milliseconds):

1. fold the spend changes committed since the last claim into the running totals, and resume
   parked items whose scope's budget changed, whose period rolled over or whose scope had a
   reservation of unknown outcome released at the horizon since;
2. read the candidates (each tenant's first items due, in rank order), the leased items (in
   flight per tenant and per route), the routes' rate-limiter state and the budgets of every
   scope a candidate's call belongs to (org, project, thread and parent thread, model route)
   with their spend in the period (from the running totals: a few rows per scope);
3. ``schedule.plan_claim`` picks;
4. lease the picked items (still waiting: a cancellation may have ended one meanwhile), start
   their threads, reserve each one's next attempt's spend in all of its scopes (one spend row
   naming them), save the rate limiters, park the waiting items of scopes whose budget is used
   up.

Routes on probation (probation.sql: none of their bills settled within its reservation yet) are
read in step 2: ``plan_claim`` gives each one call at a time.

Nothing is paid here: a claimed item's attempt starts later, in the executor's batch, and only
against the reservation made here (executor.py refuses to start an attempt without one).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Final
from uuid import UUID

import asyncpg

from consumers.work_executor.schedule import (
    Blocked,
    BudgetState,
    Candidate,
    ClaimPlan,
    Park,
    Resolve,
    RouteState,
    Situation,
    plan_claim,
)
from producers.work.domain.budgets import Scope, ScopeKind, scope_budgets
from producers.work.domain.story.prompts import prompt_bytes_bound
from producers.work.domain.types import Conn
from spectral.db.locks import LockClass
from spectral.db.queries import load_queries
from spectral.llm.limits import ProviderLimits

_SQL = load_queries(Path(__file__).with_name("claims.sql"))
_PROBATION = load_queries(Path(__file__).with_name("probation.sql"))

TENANTS_PER_ITEM: Final = 4
"""A claim of n items reads the candidates of the 4n tenants next in line at most (tenants
blocked by a route, a budget or their cap make room for the next ones)."""

SCHEDULER_LOCK: Final = LockClass.WORK_SCHEDULER
"""The advisory lock class of claims (spectral/db/locks.py)."""


@dataclass(frozen=True)
class Claimed:
    """What one claim did."""

    jobs: list[tuple[UUID, UUID]] = field(default_factory=list)
    """(work_item_id, lease_token) of the items leased."""
    wanted: int = 0
    parked: int = 0
    parked_by: dict[ScopeKind, int] = field(default_factory=dict)
    """Items parked, by the kind of the scope whose budget parked them."""
    resumed: int = 0
    blocked: dict[str, Blocked] = field(default_factory=dict)
    retry_in: float | None = None
    """Seconds until a route that blocked this claim has room again (rates, pauses)."""

    @property
    def exhausted(self) -> bool:
        """Fewer items were claimable than wanted: nothing more can be claimed right now."""
        return len(self.jobs) < self.wanted


class ClaimRepository:
    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        resolve: Resolve,
        limits: ProviderLimits,
        tenant_cap: int | None = None,
    ) -> None:
        self._pool = pool
        self._resolve = resolve
        self._limits = limits
        self._tenant_cap = tenant_cap

    async def claim(
        self, want: int, token: UUID, worker: str, *, only: Sequence[UUID] | None = None
    ) -> Claimed:
        """Lease at most ``want`` items under ``token`` (one transaction, see the module doc);
        ``only``: of these items and no other (a replay claims the items its records name)."""
        if want < 1:
            return Claimed()
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute(_SQL["scheduler_lock"], SCHEDULER_LOCK)
            await conn.execute(_SQL["fold_spend"])
            resumed = len(await conn.fetch(_SQL["resume_parked"]))
            situation = await self._situation(conn, want, only)
            plan = plan_claim(situation)
            jobs = await self._lease(conn, plan, token, worker)
            await self._save_routes(conn, plan)
            parked_by = await self._park(conn, plan.park) if plan.park else {}
        return Claimed(
            jobs,
            want,
            sum(parked_by.values()),
            parked_by,
            resumed,
            plan.blocked,
            plan.retry_in,
        )

    @staticmethod
    async def _park(conn: Conn, park: dict[Scope, Park]) -> dict[ScopeKind, int]:
        refused = [(item, scope, p.reason) for scope, p in sorted(park.items()) for item in p.items]
        rows = await conn.fetch(
            _SQL["park"],
            [item for item, _, _ in refused],
            [scope[0].value for _, scope, _ in refused],
            [scope[1] for _, scope, _ in refused],
            [reason for _, _, reason in refused],
        )
        return dict(Counter(ScopeKind(row["park_scope_kind"]) for row in rows))

    async def _situation(self, conn: Conn, want: int, only: Sequence[UUID] | None) -> Situation:
        if only is None:
            rows = await conn.fetch(_SQL["candidates"], want, want * TENANTS_PER_ITEM)
        else:
            rows = await conn.fetch(_SQL["candidates_of"], list(only))
        candidates = [
            Candidate(
                work_item_id=row["work_item_id"],
                tenant=row["tenant"],
                org_id=row["org_id"],
                function_key=row["function_key"],
                rank_at=row["rank_at"],
                attempt=row["attempt"],
                project_id=row["project_id"],
                thread_id=row["thread_id"],
                parent_thread_id=row["parent_thread_id"],
                prompt_bytes=row["prompt_bytes"]
                if row["prompt_bytes"] is not None
                else prompt_bytes_bound(
                    epic_id_bytes=row["epic_id_bytes"],
                    title_bytes=row["title_bytes"],
                    backlog_title_bytes=row["backlog_title_bytes"],
                    description_bytes=row["description_bytes"],
                ),
            )
            for row in rows
        ]
        now: datetime = await conn.fetchval(_SQL["now"])
        if not candidates:
            return Situation(now, want, [], {}, self._resolve, self._limits)
        tenants: Counter[str] = Counter()
        calling: Counter[str] = Counter()
        for row in await conn.fetch(_SQL["leased"]):
            tenants[row["tenant"]] += 1
            if row["route"] is not None and row["calling"]:
                calling[row["route"]] += 1
        models = sorted(
            {m for c in candidates if (m := self._resolve(c.function_key, c.org_id)) is not None}
        )
        routes = {
            row["model"]: RouteState(
                in_flight=calling[row["model"]],
                request_tat=_finite(row["request_tat"]),
                token_tat=_finite(row["token_tat"]),
                paused_until=_finite(row["paused_until"]),
                reserve_ratio=row["reserve_ratio"],
                suspended=row["suspended"],
            )
            for row in await conn.fetch(_SQL["route_states"], models)
        }
        for model in models:
            routes.setdefault(model, RouteState(in_flight=calling[model]))
        for row in await conn.fetch(_PROBATION["on_probation"], models):
            routes[row["model"]] = replace(routes[row["model"]], probation=True)
        scopes = sorted(
            {
                scope
                for c in candidates
                for scope in c.scopes(self._resolve(c.function_key, c.org_id))
            }
        )
        budget_states = {
            # A reservation of unknown outcome is resolved by its policy (re-issued and settled,
            # or released at the horizon: outcomes.py), so it may give room back like one not
            # settled yet: the scope's items wait for it instead of parking.
            scope: BudgetState(
                view.token_limit,
                view.cost_limit,
                view.tokens,
                view.cost,
                view.outstanding + view.unknown,
            )
            for scope, view in (await scope_budgets(conn, scopes)).items()
        }
        return Situation(
            now=now,
            want=want,
            candidates=candidates,
            tenant_in_flight=dict(tenants),
            resolve=self._resolve,
            limits=self._limits,
            routes=routes,
            budgets=budget_states,
            tenant_cap=self._tenant_cap,
        )

    @staticmethod
    async def _lease(
        conn: Conn, plan: ClaimPlan, token: UUID, worker: str
    ) -> list[tuple[UUID, UUID]]:
        if not plan.picks:
            return []
        picks = plan.picks
        rows = await conn.fetch(
            _SQL["claim"],
            [p.candidate.work_item_id for p in picks],
            [p.model for p in picks],
            [p.tokens for p in picks],
            [p.cost for p in picks],
            [p.limits.prompt_price for p in picks],
            [p.limits.completion_price for p in picks],
            token,
            worker,
            [p.ratio for p in picks],
        )
        claimed = {row["work_item_id"] for row in rows}
        # In the order the plan chose them (fair order), which is the order they run in.
        return [
            (p.candidate.work_item_id, token) for p in picks if p.candidate.work_item_id in claimed
        ]

    @staticmethod
    async def _save_routes(conn: Conn, plan: ClaimPlan) -> None:
        if not plan.routes:
            return
        models = sorted(plan.routes)
        await conn.execute(
            _SQL["save_routes"],
            models,
            [plan.routes[m][0] for m in models],
            [plan.routes[m][1] for m in models],
        )


def _finite(value: datetime | None) -> datetime | None:
    """asyncpg reads ``-infinity`` as ``datetime.min``-like sentinels; treat them as never."""
    if value is None or value.year <= 1:
        return None
    return value
