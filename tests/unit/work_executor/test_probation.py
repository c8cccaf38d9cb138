"""Route probation, pure: a model route that has had no bill settled within its reservation yet
(new, raised after an overrun, or resumed) takes one call at a time, whatever its concurrency,
its rates or the budgets leave room for — so a provider that over-reports can overrun by one
call's worth at most before its first bill is fed back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from uuid import uuid4

from hypothesis import given
from hypothesis import strategies as st

from consumers.work_executor.schedule import (
    Blocked,
    BudgetState,
    Candidate,
    RouteState,
    Situation,
    plan_claim,
)
from producers.work.domain.budgets import ScopeKind
from spectral.llm.limits import ProviderLimits, RouteLimits

NOW = datetime(2026, 12, 1, 23, 0, tzinfo=UTC)


def _candidates(tenant: str, count: int) -> list[Candidate]:
    return [
        Candidate(
            work_item_id=uuid4(),
            tenant=tenant,
            org_id=tenant.removeprefix("org:"),
            function_key="story_generate",
            rank_at=NOW - timedelta(seconds=100 - n),
            attempt=0,
            prompt_bytes=800,
        )
        for n in range(count)
    ]


def _situation(
    candidates: list[Candidate],
    routes: dict[str, RouteState],
    *,
    want: int = 50,
    limits: ProviderLimits | None = None,
    resolve: dict[str, str] | None = None,
) -> Situation:
    to = resolve or {}
    return Situation(
        now=NOW,
        want=want,
        candidates=candidates,
        tenant_in_flight={},
        resolve=lambda _f, org: to.get(org or "", "m"),
        limits=limits or ProviderLimits(by_model={"m": RouteLimits(max_tokens=100)}),
        routes=routes,
    )


def test_a_route_on_probation_takes_one_call_and_says_why_the_others_wait() -> None:
    plan = plan_claim(_situation(_candidates("org:acme", 10), {"m": RouteState(probation=True)}))
    assert len(plan.picks) == 1
    assert plan.blocked == {"m": Blocked.PROBATION}
    assert plan.park == {}  # waiting for the probe's bill, not for budget
    assert plan.retry_in is None  # room comes back when the probe settles, not at a known time


def test_a_route_on_probation_with_its_probe_in_flight_takes_nothing() -> None:
    plan = plan_claim(
        _situation(_candidates("org:acme", 5), {"m": RouteState(in_flight=1, probation=True)})
    )
    assert plan.picks == []
    assert plan.blocked == {"m": Blocked.PROBATION}


def test_a_proven_route_takes_what_its_limits_allow() -> None:
    plan = plan_claim(_situation(_candidates("org:acme", 10), {"m": RouteState()}))
    assert len(plan.picks) == 10


def test_probation_is_per_route_other_routes_go_on() -> None:
    candidates = [*_candidates("org:new", 5), *_candidates("org:old", 5)]
    plan = plan_claim(
        _situation(
            candidates,
            {"fresh": RouteState(probation=True), "m": RouteState()},
            resolve={"new": "fresh"},
            limits=ProviderLimits(
                by_model={
                    "m": RouteLimits(max_tokens=100),
                    "fresh": RouteLimits(max_tokens=100),
                }
            ),
        )
    )
    models = [p.model for p in plan.picks]
    assert models.count("fresh") == 1
    assert models.count("m") == 5


@given(
    in_flight=st.integers(0, 5),
    concurrency=st.none() | st.integers(1, 20),
    tenants=st.integers(1, 4),
    per_tenant=st.integers(1, 12),
    want=st.integers(1, 40),
    budget=st.none() | st.integers(0, 50_000),
)
def test_a_route_on_probation_never_has_more_than_one_call_in_flight(  # noqa: PLR0917 - drawn
    in_flight: int,
    concurrency: int | None,
    tenants: int,
    per_tenant: int,
    want: int,
    budget: int | None,
) -> None:
    candidates = [c for t in range(tenants) for c in _candidates(f"org:t{t}", per_tenant)]
    limits = ProviderLimits(by_model={"m": RouteLimits(max_tokens=100, concurrency=concurrency)})
    situation = Situation(
        now=NOW,
        want=want,
        candidates=candidates,
        tenant_in_flight={},
        resolve=lambda _f, _o: "m",
        limits=limits,
        routes={"m": RouteState(in_flight=in_flight, probation=True)},
        budgets={
            (ScopeKind.ORG, f"t{t}"): BudgetState(budget, None, 0, Decimal(0), 0)
            for t in range(tenants)
            if budget is not None
        },
    )
    plan = plan_claim(situation)
    assert in_flight + len(plan.picks) <= max(in_flight, 1)
    if plan.picks:
        assert in_flight == 0
