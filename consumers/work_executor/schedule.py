"""Which waiting items a claim takes, and why the others wait. Pure: no I/O, no clock
(``Situation.now`` is the database's), so every rule below is tested without a database.

A claim (claims.py) reads the situation under the scheduler's lock and asks ``plan_claim``:

* **Fairness across tenants.** A tenant is an org (``org:{id}``), else a project. Claims go
  round-robin by *least in flight*: the next slot goes to the tenant with the fewest items
  leased right now (ties: the one whose best item ranks first), one item at a time. A tenant
  with 10,000 queued items and one with 10 therefore share the capacity evenly, and a tenant
  that has nothing in flight is served at the very next free slot — however long the other's
  queue. ``tenant_cap`` (optional) bounds one tenant's leased items across every executor.
* **Priorities within a tenant.** Each tenant's candidates come in ``rank_at`` order (enqueue
  time + the priority's delay: producers/work/domain/priority.py).
* **Provider limits per model route** (spectral/llm/limits.py): calls in flight, requests per
  minute and tokens per minute (GCRA token buckets holding at most ``burst_seconds`` worth), and
  a pause a gateway asked for with 429 + Retry-After. An item whose route has no capacity is not
  claimed: it keeps waiting, unleased and unpaid — waiting for capacity is never an attempt.
  ``retry_in`` says when a rate-limited route has room again.
* **Budgets per org: a hard cap on what is admitted.** An item is claimed only if its
  reservation — its call's worst case (the prompt's tokens as counted plus the completion bound,
  priced) times its route's reserve ratio — fits what is left of its org's budget for the
  period: settled spend plus outstanding reservations plus this one never pass a limit. A
  provider that bills a call more than it was allowed (a *provider overrun*: it ignored
  ``max_tokens``, counted reasoning or cached tokens) is recorded as billed when it settles and
  fed back to its route (transitions.py): the route's reserve ratio rises to what it really
  bills, or the route is *suspended* (no call starts: ``Blocked.SUSPENDED``) until an operator
  resumes it. When an item does not fit, and
  nothing of the org is outstanding (every reservation settled, so nothing can free room), the
  org's waiting items are *parked*; while reservations are outstanding they just wait, since
  settling (actual usage is at most the reservation) may make room.
* **Route probation.** A route none of whose bills has settled within its reservation yet — a
  new route, one whose reservations were just raised (or that was suspended) after an overrun,
  one an operator resumed — takes one call at a time (``Blocked.PROBATION``), whatever its
  concurrency allows, until a bill settles within its reservation. A provider that bills more
  than it is allowed therefore overruns by one call at most before its bill is fed back.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from typing import Final
from uuid import UUID

from producers.work.domain.story.prompts import prompt_tokens_bound
from spectral.llm.limits import ProviderLimits, RouteLimits

DEFAULT_COMPLETION_TOKENS: Final = 4096
"""Reserved for the completion of a model route without ``max_tokens`` (an estimate then, not
a bound: configure max_tokens to make budgets exact)."""

Resolve = Callable[[str, str | None], str | None]
"""(function_key, org_id) -> the model its call goes to, None when no route resolves."""


class Blocked(StrEnum):
    """Why a route took no more calls in a claim (the label set of the provider-wait counter)."""

    CONCURRENCY = "concurrency"
    REQUESTS = "requests_per_minute"
    TOKENS = "tokens_per_minute"
    PAUSED = "paused"
    SUSPENDED = "suspended"  # a provider overran its reservations: an operator resumes it
    PROBATION = "probation"  # no bill of the route settled within its reservation yet: one call


@dataclass(frozen=True)
class Candidate:
    """A waiting item, due now, as the claim reads it."""

    work_item_id: UUID
    tenant: str
    org_id: str | None
    function_key: str
    rank_at: datetime
    attempt: int
    prompt_bytes: int
    """An upper bound of its prompt's UTF-8 length (prompts.prompt_bytes_bound)."""


@dataclass(frozen=True)
class RouteState:
    in_flight: int = 0
    """Calls of the route in flight (leased items whose current call has no response yet)."""
    request_tat: datetime | None = None
    token_tat: datetime | None = None
    paused_until: datetime | None = None
    reserve_ratio: Decimal = Decimal(1)
    """Reservations of the route are their worst case times this (>= 1): raised after the
    provider billed more than a call was allowed (a provider overrun)."""
    suspended: bool = False
    """No new call of the route starts (a provider overrun, by policy): an operator resumes it."""
    probation: bool = False
    """No bill of the route has settled within its reservation since it was first seen, raised
    after an overrun or resumed: it takes one call at a time until one does."""


@dataclass(frozen=True)
class BudgetState:
    token_limit: int | None
    cost_limit: Decimal | None
    tokens: int
    """Spent in the period: settled usage, plus reservations not settled (nor released)."""
    cost: Decimal
    outstanding: int
    """Reservations not settled yet: when they settle, room may come back."""

    def fits(self, tokens: int, cost: Decimal) -> bool:
        if self.token_limit is not None and self.tokens + tokens > self.token_limit:
            return False
        return self.cost_limit is None or self.cost + cost <= self.cost_limit


@dataclass(frozen=True)
class Situation:
    now: datetime
    want: int
    candidates: Sequence[Candidate]
    tenant_in_flight: Mapping[str, int]
    resolve: Resolve
    limits: ProviderLimits
    routes: Mapping[str, RouteState] = field(default_factory=dict)
    budgets: Mapping[str, BudgetState] = field(default_factory=dict)
    tenant_cap: int | None = None


@dataclass(frozen=True)
class Pick:
    candidate: Candidate
    model: str | None
    tokens: int
    cost: Decimal
    limits: RouteLimits
    ratio: Decimal = Decimal(1)
    """The route's reserve ratio the reservation was made with."""

    @property
    def attempt(self) -> int:
        """The attempt the reservation is for: the next one."""
        return self.candidate.attempt + 1


@dataclass
class ClaimPlan:
    picks: list[Pick] = field(default_factory=list)
    park: dict[str, str] = field(default_factory=dict)
    """org -> why its waiting items are parked."""
    routes: dict[str, tuple[datetime | None, datetime | None]] = field(default_factory=dict)
    """model -> its new (request_tat, token_tat) after the picks."""
    blocked: dict[str, Blocked] = field(default_factory=dict)
    retry_in: float | None = None
    """Seconds until a route blocked by a rate or a pause has room again (None: no such wait)."""


def reservation(
    candidate: Candidate, limits: RouteLimits, ratio: Decimal = Decimal(1)
) -> tuple[int, Decimal]:
    """What to reserve for ``candidate``'s call: its worst case — the prompt's tokens as
    counted plus the completion bound, priced — times the route's reserve ratio."""
    prompt = prompt_tokens_bound(candidate.prompt_bytes)
    completion = limits.max_tokens or DEFAULT_COMPLETION_TOKENS
    tokens = math.ceil(Decimal(prompt + completion) * ratio)
    return tokens, limits.cost(prompt, completion) * ratio


class _Route:
    """One model route's capacity during a plan (GCRA for requests and tokens)."""

    def __init__(self, limits: RouteLimits, state: RouteState, now: datetime) -> None:
        self.limits = limits
        self.in_flight = state.in_flight
        self.request_tat = state.request_tat
        self.token_tat = state.token_tat
        self.paused_until = state.paused_until
        self.suspended = state.suspended
        self.probation = state.probation
        self.now = now
        self.changed = False

    def _after(self, tat: datetime | None, seconds: float) -> datetime:
        start = self.now if tat is None or tat < self.now else tat
        return start + timedelta(seconds=seconds)

    def check(self, tokens: int) -> tuple[Blocked | None, float | None]:
        """Why a call of ``tokens`` cannot start now (and in how many seconds it could)."""
        limits = self.limits
        if self.suspended:
            return Blocked.SUSPENDED, None
        if self.paused_until is not None and self.paused_until > self.now:
            return Blocked.PAUSED, (self.paused_until - self.now).total_seconds()
        held = self._held()
        if held is not None:
            return held, None
        if limits.rpm is not None:
            interval = 60.0 / limits.rpm
            burst = max(limits.burst_seconds, interval)
            wait = (self._after(self.request_tat, interval) - self.now).total_seconds() - burst
            if wait > 0:
                return Blocked.REQUESTS, wait
        if limits.tpm is not None:
            cost = tokens * 60.0 / limits.tpm
            burst = max(limits.burst_seconds, cost)
            wait = (self._after(self.token_tat, cost) - self.now).total_seconds() - burst
            if wait > 0:
                return Blocked.TOKENS, wait
        return None, None

    def _held(self) -> Blocked | None:
        """Why no more calls may be in flight: on probation with its one call in flight, or at
        its concurrency."""
        if self.probation and self.in_flight >= 1:
            return Blocked.PROBATION
        if self.limits.concurrency is not None and self.in_flight >= self.limits.concurrency:
            return Blocked.CONCURRENCY
        return None

    def take(self, tokens: int) -> None:
        self.in_flight += 1
        if self.limits.rpm is not None:
            self.request_tat = self._after(self.request_tat, 60.0 / self.limits.rpm)
            self.changed = True
        if self.limits.tpm is not None:
            self.token_tat = self._after(self.token_tat, tokens * 60.0 / self.limits.tpm)
            self.changed = True


def plan_claim(situation: Situation) -> ClaimPlan:  # noqa: C901, PLR0912, PLR0915 - one loop, a branch per rule
    """The items to claim now (at most ``want``), in the order they were chosen."""
    plan = ClaimPlan()
    queues: dict[str, deque[Candidate]] = defaultdict(deque)
    for candidate in sorted(situation.candidates, key=lambda c: (c.rank_at, c.work_item_id)):
        queues[candidate.tenant].append(candidate)
    in_flight = dict(situation.tenant_in_flight)
    heap = [(in_flight.get(t, 0), q[0].rank_at, t) for t, q in queues.items()]
    heapq.heapify(heap)
    routes: dict[str, _Route] = {}
    spent: dict[str, BudgetState] = dict(situation.budgets)
    waiting_orgs: set[str] = set()
    while heap and len(plan.picks) < situation.want:
        _, _, tenant = heapq.heappop(heap)
        queue = queues[tenant]
        if situation.tenant_cap is not None and in_flight.get(tenant, 0) >= situation.tenant_cap:
            continue
        candidate = queue.popleft()
        model = situation.resolve(candidate.function_key, candidate.org_id)
        limits = situation.limits.for_model(model)
        ratio = _ratio(situation, model)
        tokens, cost = reservation(candidate, limits, ratio)
        org = candidate.org_id
        budget = spent.get(org) if org is not None else None
        if org is not None and budget is not None and not budget.fits(tokens, cost):
            if budget.outstanding == 0:
                plan.park[org] = _park_reason(org, budget, tokens, cost)
            else:
                waiting_orgs.add(org)
            continue  # the tenant (its org) is done for this claim
        if model is not None and model not in plan.blocked:
            route = routes.get(model)
            if route is None:
                state = situation.routes.get(model, RouteState())
                route = routes[model] = _Route(limits, state, situation.now)
            blocked, wait = route.check(tokens)
            if blocked is not None:
                plan.blocked[model] = blocked
                if wait is not None:
                    plan.retry_in = wait if plan.retry_in is None else min(plan.retry_in, wait)
            else:
                route.take(tokens)
        if model is not None and model in plan.blocked:
            if queue:  # another of its items may go to a route with room
                heapq.heappush(heap, (in_flight.get(tenant, 0), queue[0].rank_at, tenant))
            continue
        plan.picks.append(Pick(candidate, model, tokens, cost, limits, ratio))
        in_flight[tenant] = in_flight.get(tenant, 0) + 1
        if budget is not None and org is not None:
            spent[org] = BudgetState(
                budget.token_limit,
                budget.cost_limit,
                budget.tokens + tokens,
                budget.cost + cost,
                budget.outstanding + 1,
            )
        if queue:
            heapq.heappush(heap, (in_flight[tenant], queue[0].rank_at, tenant))
    plan.routes = {
        model: (route.request_tat, route.token_tat)
        for model, route in routes.items()
        if route.changed
    }
    for org in waiting_orgs:
        plan.park.pop(org, None)
    return plan


def _ratio(situation: Situation, model: str | None) -> Decimal:
    state = situation.routes.get(model) if model is not None else None
    return max(state.reserve_ratio, Decimal(1)) if state is not None else Decimal(1)


def _park_reason(org: str, budget: BudgetState, tokens: int, cost: Decimal) -> str:
    parts = []
    if budget.token_limit is not None:
        parts.append(f"{budget.tokens:,} of {budget.token_limit:,} tokens")
    if budget.cost_limit is not None:
        parts.append(f"{budget.cost.normalize():f} of {budget.cost_limit.normalize():f} cost")
    return (
        f"budget of org {org} used up for this period ({', '.join(parts)} spent; the next call "
        f"needs up to {tokens:,} tokens / {cost.normalize():f}): resumes when the budget is "
        "raised or the next period starts"
    )
