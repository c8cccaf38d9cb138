"""Provider overruns, pure: what a settled call was billed beyond its reservation, the ratio
its route's reservations must rise to (so that bill is covered next time), and what the
scheduler does with a raised or a suspended route."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from uuid import uuid4

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consumers.work_executor.overruns import UNBOUNDED_RATIO, OverrunPolicy, overrun_of
from consumers.work_executor.schedule import (
    Blocked,
    BudgetState,
    Candidate,
    RouteState,
    Situation,
    plan_claim,
    reservation,
)
from producers.work.domain.budgets import ScopeKind
from spectral.llm.limits import ProviderLimits, RouteLimits

NOW = datetime(2026, 11, 28, 4, 0, tzinfo=UTC)
LIMITS = RouteLimits(max_tokens=100, prompt_price=Decimal(1), completion_price=Decimal(3))


def _candidate(n: int = 0) -> Candidate:
    return Candidate(
        work_item_id=uuid4(),
        tenant="org:acme",
        org_id="acme",
        function_key="story_generate",
        rank_at=NOW - timedelta(seconds=100 - n),
        attempt=0,
        prompt_bytes=800,
    )


def test_a_bill_within_the_reservation_is_no_overrun() -> None:
    assert (
        overrun_of(
            tokens=500,
            cost=Decimal(1),
            reserved_tokens=500,
            reserved_cost=Decimal(1),
            reserve_ratio=Decimal(1),
        )
        is None
    )


@given(
    billed=st.integers(0, 10**9),
    worst_case=st.integers(1, 10**7),
    ratio=st.decimals(min_value=1, max_value=50, places=3),
)
def test_the_raised_ratio_covers_what_the_route_billed(
    billed: int, worst_case: int, ratio: Decimal
) -> None:
    reserved = math.ceil(worst_case * ratio)  # as schedule.reservation reserves it
    found = overrun_of(
        tokens=billed,
        cost=Decimal(0),
        reserved_tokens=reserved,
        reserved_cost=Decimal(0),
        reserve_ratio=ratio,
    )
    if billed <= reserved:
        assert found is None
        return
    assert found is not None
    assert found.tokens == billed - reserved  # recorded at its true size
    # The same call reserved at the new ratio covers what it billed.
    assert found.ratio == UNBOUNDED_RATIO or math.ceil(worst_case * found.ratio) >= billed


def test_a_cost_billed_against_a_reservation_of_no_cost_is_an_unbounded_overrun() -> None:
    found = overrun_of(
        tokens=10,
        cost=Decimal("0.5"),
        reserved_tokens=100,
        reserved_cost=Decimal(0),
        reserve_ratio=Decimal(1),
    )
    assert found is not None
    assert (found.tokens, found.cost, found.ratio) == (0, Decimal("0.5"), UNBOUNDED_RATIO)


def test_a_policy_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="max_ratio"):
        OverrunPolicy(max_ratio=Decimal("0.5"))


def test_reservations_scale_with_the_route_ratio() -> None:
    base_tokens, base_cost = reservation(_candidate(), LIMITS)
    tokens, cost = reservation(_candidate(), LIMITS, Decimal("2.5"))
    assert tokens >= base_tokens * Decimal("2.5")
    assert cost == base_cost * Decimal("2.5")


def _situation(route: RouteState, budget: BudgetState | None = None) -> Situation:
    return Situation(
        now=NOW,
        want=10,
        candidates=[_candidate(n) for n in range(10)],
        tenant_in_flight={},
        resolve=lambda _f, _o: "m",
        limits=ProviderLimits(by_model={"m": LIMITS}),
        routes={"m": route},
        budgets={(ScopeKind.ORG, "acme"): budget} if budget else {},
    )


def test_a_raised_route_reserves_more_and_admits_fewer_calls_into_a_budget() -> None:
    one, _ = reservation(_candidate(), LIMITS)
    budget = BudgetState(one * 6, None, 0, Decimal(0), 0)
    plain = plan_claim(_situation(RouteState(), budget))
    raised = plan_claim(_situation(RouteState(reserve_ratio=Decimal(3)), budget))
    assert len(plain.picks) == 6
    assert len(raised.picks) == 2
    assert all(p.ratio == Decimal(3) for p in raised.picks)
    # Admission: what was reserved never passes the limit.
    assert sum(p.tokens for p in raised.picks) <= one * 6


def test_a_suspended_route_takes_no_call_and_parks_nothing() -> None:
    plan = plan_claim(_situation(RouteState(suspended=True)))
    assert plan.picks == []
    assert plan.blocked == {"m": Blocked.SUSPENDED}
    assert plan.park == {}
    assert plan.retry_in is None
