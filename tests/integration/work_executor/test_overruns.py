"""The budget as a hard cap against a gateway that lies about usage (issue 23): every call is
billed 1,000 prompt + 2,000 completion tokens although it was sent ``max_tokens: 100``, across
two executors racing for one org's 6,000-token budget. What spectral admits never passes the
limit; what the provider bills beyond a reservation is recorded as billed, counted and fed back
to the route, so it does not repeat: every reservation made after the first overrun settled
covers what the route bills, and the org's spend passes its limit by no more than the overruns
of the calls already in flight then — one call, since a new route is on probation (one call at a
time) until a bill settles within its reservation. Under the ``suspend`` policy the route takes
no new call until an operator resumes it, and is on probation again once resumed."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from functools import partial

import pytest
from prometheus_client import CollectorRegistry

from consumers.work_executor.overruns import OverrunPolicy
from consumers.work_executor.store import Store
from producers.work.budgets import BudgetCommands
from producers.work.commands import GenerateAll
from producers.work.domain.budgets import Period
from producers.work.routes import list_routes, resume_route
from spectral.llm.limits import ProviderLimits
from spectral.llm.seam import SynthesisRequest, SynthesisResponse
from spectral.settings import Settings
from tests.integration.work.support import (
    DOCUMENT,
    PROJECT,
    ScriptedSynthesizer,
    backlog,
    executor,
    executor_settings,
    harness,
    run_until_settled,
)

pytestmark = pytest.mark.integration

LIMIT = 6_000
BILLED = 3_000  # what the lying gateway reports for every call
LIMITS = ProviderLimits.parse({"m": {"max_tokens": 100}})


class LyingGateway(ScriptedSynthesizer):
    """Answers as the scripted model does, but reports 1,000 + 2,000 tokens of usage."""

    async def synthesize(self, request: SynthesisRequest) -> SynthesisResponse:
        assert request.max_tokens == 100  # the bound was sent
        answer = await super().synthesize(request)
        return dataclasses.replace(
            answer, usage={"prompt_tokens": 1_000, "completion_tokens": 2_000}
        )


def _overrun_tokens(registry: CollectorRegistry) -> float:
    return sum(
        s.value
        for m in registry.collect()
        for s in m.samples
        if s.name == "work_usage_overrun_tokens_total"
    )


async def test_a_lying_gateway_is_detected_fed_back_and_cannot_repeat_across_two_executors(
    database_url: str, settings: Settings
) -> None:
    gateway = LyingGateway()
    registries = [CollectorRegistry(), CollectorRegistry()]
    async with (
        harness(database_url) as h,
        executor(
            executor_settings(settings),
            database_url,
            gateway,
            worker="w1",
            registry=registries[0],
            limits=LIMITS,
            resolve=lambda _f, _o: "m",
        ) as one,
        executor(
            executor_settings(settings),
            database_url,
            gateway,
            worker="w2",
            registry=registries[1],
            limits=LIMITS,
            resolve=lambda _f, _o: "m",
        ) as two,
    ):
        budgets = BudgetCommands(h.producer)
        await budgets.set("acme", Period.DAY, token_limit=LIMIT)
        await h.commands.put_document(
            PROJECT, DOCUMENT, backlog(*(f"E {n} [slow:0.2]" for n in range(20)))
        )
        await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT, org_id="acme"))
        await asyncio.gather(
            run_until_settled(one, h.admin, timeout=60, parked_ok=True),
            run_until_settled(two, h.admin, timeout=60, parked_ok=True),
        )

        spend = await h.admin.fetch(
            "SELECT reserved_tokens, tokens, overrun_tokens, reserve_ratio, reserved_at, "
            "settled_at FROM work.spend WHERE state = 'settled' ORDER BY reserved_at"
        )
        assert spend
        assert all(s["tokens"] == BILLED for s in spend)  # recorded as billed, never clamped
        first_settled = min(s["settled_at"] for s in spend if s["overrun_tokens"] > 0)
        before = [s for s in spend if s["reserved_at"] < first_settled]
        after = [s for s in spend if s["reserved_at"] >= first_settled]
        # Probation: a new route takes one call until a bill settles within its reservation,
        # and an overrun puts it back on probation — across both executors, the lying gateway
        # never had two calls in flight, so the first wave was one call.
        assert gateway.most_in_flight == 1
        assert len(before) == 1
        # Fed back: every reservation made after the first overrun settled was raised (the
        # raised one may not fit what is left of the budget: then nothing more was admitted).
        assert all(s["reserve_ratio"] > 1 for s in after)
        assert all(s["reserved_tokens"] > before[0]["reserved_tokens"] for s in after)
        # Admission held each call within the limit, so with one call in flight at a time the
        # limit is passed by one call's overrun at most (here it is not passed at all).
        total = sum(s["tokens"] for s in spend)
        assert total <= LIMIT + max(s["overrun_tokens"] for s in spend)
        view = await budgets.get("acme")
        assert view is not None
        assert view.tokens == total
        # Counted (bounded label: the model route), with its size.
        overrun = sum(s["overrun_tokens"] for s in spend)
        assert overrun > 0
        assert sum(_overrun_tokens(r) for r in registries) == overrun
        [route] = await list_routes(h.admin)
        assert route.model == "m"
        assert route.overruns == sum(1 for s in spend if s["overrun_tokens"] > 0)
        assert route.overrun_tokens == overrun
        assert route.reserve_ratio * before[0]["reserved_tokens"] >= BILLED
        assert route.suspended_at is None
        # On probation while its last bill overran; a bill within its reservation ends it.
        last = max(spend, key=lambda s: s["settled_at"])
        assert route.probation == (last["overrun_tokens"] > 0)
        # The rest waits for budget, unpaid; nothing was paid twice.
        statuses = Counter(r["status"] for r in await h.items())
        assert set(statuses) <= {"applied", "parked"}
        assert statuses["applied"] == len(spend) == gateway.total
        assert set(gateway.keys.values()) == {1}


async def test_under_the_suspend_policy_an_overrun_stops_the_route_until_it_is_resumed(
    database_url: str, settings: Settings
) -> None:
    gateway = LyingGateway()
    registry = CollectorRegistry()
    async with (
        harness(database_url) as h,
        executor(
            executor_settings(settings),
            database_url,
            gateway,
            registry=registry,
            limits=ProviderLimits.parse({"m": {"max_tokens": 100, "concurrency": 1}}),
            resolve=lambda _f, _o: "m",
            store=partial(Store.over, overruns=OverrunPolicy(suspend=True)),
        ) as handler,
    ):
        await h.commands.put_document(PROJECT, DOCUMENT, backlog(*(f"E {n}" for n in range(4))))
        await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT))
        for _ in range(5):
            await handler.sweep_once()
            await handler.drain()
        assert gateway.total == 1  # one call at a time: its overrun suspended the route
        [route] = await list_routes(h.admin)
        assert route.suspended_at is not None
        assert route.suspend_reason is not None
        assert "provider overrun" in route.suspend_reason
        statuses = Counter(r["status"] for r in await h.items())
        assert statuses == {"applied": 1, "queued": 3}  # waiting, not failed, not parked
        waits = registry.get_sample_value(
            "work_provider_waits_total", {"model": "other", "reason": "suspended"}
        )
        assert waits is not None
        assert waits > 0

        resumed = await resume_route(h.producer, "m", reset_ratio=False)
        assert resumed.suspended_at is None
        assert resumed.probation  # one call at a time again, until a bill fits
        assert resumed.reserve_ratio > 1  # raised to what it bills: the next calls fit
        await run_until_settled(handler, h.admin)
        assert gateway.total == 4
        [route] = await list_routes(h.admin)
        assert (route.overruns, route.suspended_at) == (1, None)  # it did not repeat
        assert set(gateway.keys.values()) == {1}
