"""Model routes as providers have billed them: their provider overruns (usage billed above a
call's reservation), the reserve ratio their reservations are raised by, and suspension
(consumers/work_executor/overruns.py says when the executor raises or suspends). An operator
lists them and resumes a suspended route (optionally lowering its reserve ratio back to 1,
once the provider bills within the bound again); a resumed route is on probation (one call at a
time) until a bill settles within its reservation.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import asyncpg

from spectral.db.queries import load_queries
from spectral.errors import SpectralError

_SQL = load_queries(Path(__file__).with_name("routes.sql"))


@dataclass(frozen=True)
class RouteView:
    model: str
    reserve_ratio: Decimal
    overruns: int
    overrun_tokens: int
    overrun_cost: Decimal
    suspended_at: datetime | None
    suspend_reason: str | None
    probation: bool = False
    """No bill has settled within its reservation since it was first called, raised or
    resumed: it takes one call at a time until one does."""


class UnknownRouteError(SpectralError, LookupError):
    """No provider route of that model is known (it has never been called)."""


def _view(row: asyncpg.Record) -> RouteView:
    return RouteView(
        model=row["model"],
        reserve_ratio=row["reserve_ratio"],
        overruns=row["overruns"],
        overrun_tokens=row["overrun_tokens"],
        overrun_cost=row["overrun_cost"],
        suspended_at=row["suspended_at"],
        suspend_reason=row["suspend_reason"],
        probation=row["probation"],
    )


async def list_routes(pool: asyncpg.Pool) -> list[RouteView]:
    return [_view(row) for row in await pool.fetch(_SQL["list_routes"])]


async def resume_route(pool: asyncpg.Pool, model: str, *, reset_ratio: bool) -> RouteView:
    """Lift a route's suspension (and, with ``reset_ratio``, its raised reservations)."""
    row = await pool.fetchrow(_SQL["resume_route"], model, reset_ratio)
    if row is None:
        raise UnknownRouteError(model)
    return _view(row)
