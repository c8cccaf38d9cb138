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
* **Nested budgets: a hard cap on what is admitted, in every scope.** A call belongs to its
  org, project, thread and parent thread, and model route; it is claimed only if its
  reservation (its worst case times its route's reserve ratio) fits *every* one of those
  scopes' budgets: settled spend plus reservations never pass a limit. A provider overrun is
  recorded as billed and fed back to its route (transitions.py). A scope that refuses with
  nothing outstanding parks its waiting items, naming it; with reservations outstanding
  (they may settle lower) they wait. An org refusing ends its tenant's turn; a narrower scope
  skips the item. (docs/explanation/work-ledger.md, "Nested scopes".)
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

from producers.work.domain.budgets import Scope, ScopeKind
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
    project_id: str | None = None
    thread_id: UUID | None = None
    parent_thread_id: UUID | None = None

    def scopes(self, model: str | None) -> list[Scope]:
        """The budget scopes its call belongs to, outermost first."""
        found: list[Scope] = []
        if self.org_id is not None:
            found.append((ScopeKind.ORG, self.org_id))
        if self.project_id is not None:
            found.append((ScopeKind.PROJECT, self.project_id))
        if self.parent_thread_id is not None:
            found.append((ScopeKind.THREAD, str(self.parent_thread_id)))
        if self.thread_id is not None:
            found.append((ScopeKind.THREAD, str(self.thread_id)))
        if model is not None:
            found.append((ScopeKind.ROUTE, model))
        return found


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
    """Reservations not settled yet, or of unknown outcome (resolved by a policy): when they
    settle or are released, room may come back."""

    def fits(self, tokens: int, cost: Decimal) -> bool:
        if self.token_limit is not None and self.tokens + tokens > self.token_limit:
            return False
        return self.cost_limit is None or self.cost + cost <= self.cost_limit

    def plus(self, tokens: int, cost: Decimal) -> BudgetState:
        """With one more reservation."""
        return BudgetState(
            self.token_limit,
            self.cost_limit,
            self.tokens + tokens,
            self.cost + cost,
            self.outstanding + 1,
        )


@dataclass(frozen=True)
class Situation:
    now: datetime
    want: int
    candidates: Sequence[Candidate]
    tenant_in_flight: Mapping[str, int]
    resolve: Resolve
    limits: ProviderLimits
    routes: Mapping[str, RouteState] = field(default_factory=dict)
    budgets: Mapping[Scope, BudgetState] = field(default_factory=dict)
    """The budgets of the candidates' scopes (a scope absent: not limited)."""
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
class Park:
    """A scope whose budget parks its waiting items: for an org, project or thread every
    waiting item of the scope; for a model route the refused items (which route an item's call
    goes to is decided here, not in the database)."""

    reason: str
    items: list[UUID] = field(default_factory=list)


@dataclass
class ClaimPlan:
    picks: list[Pick] = field(default_factory=list)
    park: dict[Scope, Park] = field(default_factory=dict)
    """scope -> why its waiting items are parked (and the refused items)."""
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
    spent: dict[Scope, BudgetState] = dict(situation.budgets)
    waiting: set[Scope] = set()
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
        scopes = [scope for scope in candidate.scopes(model) if scope in spent]
        refusing = [scope for scope in scopes if not spent[scope].fits(tokens, cost)]
        if refusing:
            idle = [scope for scope in refusing if spent[scope].outstanding == 0]
            if idle:
                scope = idle[0]
                park = plan.park.setdefault(
                    scope, Park(_park_reason(scope, spent[scope], tokens, cost))
                )
                park.items.append(candidate.work_item_id)
            else:
                waiting.update(refusing)
            if refusing[0][0] is not ScopeKind.ORG and queue:
                # another of its items may belong to a project, thread or route with room
                heapq.heappush(heap, (in_flight.get(tenant, 0), queue[0].rank_at, tenant))
            continue  # an org refusing: the tenant is done for this claim
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
        for scope in scopes:
            spent[scope] = spent[scope].plus(tokens, cost)
        if queue:
            heapq.heappush(heap, (in_flight[tenant], queue[0].rank_at, tenant))
    plan.routes = {
        model: (route.request_tat, route.token_tat)
        for model, route in routes.items()
        if route.changed
    }
    for scope in waiting:
        # a reservation of it may settle for less: its items wait instead
        plan.park.pop(scope, None)
    return plan


def _ratio(situation: Situation, model: str | None) -> Decimal:
    state = situation.routes.get(model) if model is not None else None
    return max(state.reserve_ratio, Decimal(1)) if state is not None else Decimal(1)


def _park_reason(scope: Scope, budget: BudgetState, tokens: int, cost: Decimal) -> str:
    parts = []
    if budget.token_limit is not None:
        parts.append(f"{budget.tokens:,} of {budget.token_limit:,} tokens")
    if budget.cost_limit is not None:
        parts.append(f"{budget.cost.normalize():f} of {budget.cost_limit.normalize():f} cost")
    kind, scope_id = scope
    return (
        f"budget of {kind.value} {scope_id} used up for this period ({', '.join(parts)} spent; "
        f"the next call needs up to {tokens:,} tokens / {cost.normalize():f}): resumes when "
        "the budget is raised or the next period starts"
    )
