"""Provider limits and spend budgets against PostgreSQL and a gateway over HTTP: a route's
concurrency is never exceeded and waiting for it is not an attempt; a 429 pauses its route for
its Retry-After and is not counted; an org's budget is never exceeded, the work over it is
parked (not failed, not paid) and resumes when the budget is raised; every paid answer settles
its reservation from the usage it reported."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from decimal import Decimal

import pytest
from prometheus_client import CollectorRegistry

from producers.work.budgets import BudgetCommands
from producers.work.commands import GenerateAll
from producers.work.domain.budgets import Period
from producers.work.schemas import BudgetOut
from spectral.llm.limits import ProviderLimits
from spectral.settings import Settings
from tests.fakes.openai_server import FakeModelServer
from tests.integration.work.support import (
    DOCUMENT,
    PROJECT,
    ScriptedSynthesizer,
    backlog,
    executor,
    executor_settings,
    gateway_executor,
    harness,
    run_until_settled,
)

pytestmark = pytest.mark.integration


async def test_a_route_never_runs_more_calls_than_its_concurrency_and_waiting_is_no_attempt(
    database_url: str, settings: Settings
) -> None:
    model = ScriptedSynthesizer()
    registry = CollectorRegistry()
    async with (
        harness(database_url) as h,
        executor(
            executor_settings(settings),
            database_url,
            model,
            registry=registry,
            limits=ProviderLimits.parse({"m": {"concurrency": 2}}),
            resolve=lambda _f, _o: "m",
        ) as handler,
    ):
        await h.commands.put_document(
            PROJECT, DOCUMENT, backlog(*(f"Epic {n} [slow:0.3]" for n in range(7)))
        )
        await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT))
        await run_until_settled(handler, h.admin)
        assert model.most_in_flight == 2
        assert model.total == 7
        assert {(r["status"], r["attempt"]) for r in await h.items()} == {("applied", 1)}
        waits = registry.get_sample_value(
            "work_provider_waits_total", {"model": "other", "reason": "concurrency"}
        )
        assert waits is not None
        assert waits > 0


async def test_a_429_pauses_its_route_for_its_retry_after_and_is_not_an_attempt(
    database_url: str, settings: Settings
) -> None:
    registry = CollectorRegistry()
    with FakeModelServer() as server:
        async with gateway_executor(
            settings,
            database_url,
            server,
            registry=registry,
            work_max_attempts=1,  # the 429 must not use it up
        ) as (h, handler):
            await h.commands.put_document(
                PROJECT, DOCUMENT, backlog("Busy [ratelimited:1:1]", "Later")
            )
            await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT))
            # The later item is released only once the 429 has been served and its pause
            # recorded, however late the busy item's call comes: from then on it waits for the
            # route's Retry-After like every other call of the route.
            await h.admin.execute(
                "UPDATE work.work_items SET not_before = 'infinity' WHERE input->>'epic_id' = 'E2'"
            )
            deadline = time.monotonic() + 60
            while not await h.admin.fetchval(
                "SELECT rate_limited >= 1 FROM work.provider_routes WHERE model = 'fake-model'"
            ):
                assert time.monotonic() < deadline, "the 429 was never served"
                await handler.sweep_once()
                await asyncio.sleep(0.02)
            await h.admin.execute(
                "UPDATE work.work_items SET not_before = now() WHERE input->>'epic_id' = 'E2'"
            )
            await run_until_settled(handler, h.admin)
            items = {
                r["epic"]: r
                for r in await h.admin.fetch(
                    "SELECT input->>'epic_id' AS epic, work_item_id, status, attempt "
                    "FROM work.work_items"
                )
            }
        calls = server.snapshot()
    busy, later = str(items["E1"]["work_item_id"]), str(items["E2"]["work_item_id"])
    assert (items["E1"]["status"], items["E1"]["attempt"]) == ("applied", 2)
    assert items["E2"]["status"] == "applied"
    assert Counter(c.idempotency_key for c in calls).most_common(1)[0][1] == 1
    refused_at = next(c.received_at for c in calls if c.item == busy)
    later_at = next(c.received_at for c in calls if c.item == later)
    assert later_at >= refused_at + 0.95  # nobody called the model during its Retry-After
    retried_at = [c.received_at for c in calls if c.item == busy][1]
    assert retried_at >= refused_at + 0.95
    # (the test's metrics know no model: the route is counted as "other")
    assert registry.get_sample_value("work_rate_limited_total", {"model": "other"}) == 1


async def test_a_budget_is_never_exceeded_the_rest_is_parked_and_raising_it_resumes_the_work(
    database_url: str, settings: Settings
) -> None:
    model = ScriptedSynthesizer()
    registry = CollectorRegistry()
    limit = 1_200  # below what the 12 answers use in all (~1,560): some park, in any order
    async with (
        harness(database_url) as h,
        executor(
            executor_settings(settings),
            database_url,
            model,
            registry=registry,
            limits=ProviderLimits.parse(
                {"*": {"max_tokens": 200, "prompt_price": "1", "completion_price": "3"}}
            ),
        ) as handler,
    ):
        budgets = BudgetCommands(h.producer)
        await budgets.set("acme", Period.DAY, token_limit=limit)
        await h.commands.put_document(PROJECT, DOCUMENT, backlog(*(f"E {n}" for n in range(12))))
        await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT, org_id="acme"))
        await run_until_settled(handler, h.admin, parked_ok=True)
        view = await budgets.get("acme")
        assert view is not None
        assert view.tokens <= limit
        assert view.outstanding == 0
        statuses = Counter(r["status"] for r in await h.items())
        assert set(statuses) == {"applied", "parked"}
        assert statuses["parked"] == view.parked > 0
        assert model.total == statuses["applied"]
        parked_entries = await h.admin.fetchval(
            "SELECT count(*) FROM work.ledger_entries l JOIN work.work_items w "
            "USING (work_item_id) WHERE w.status = 'parked'"
        )
        assert parked_entries == 0  # nothing paid, nothing failed
        # Every paid answer settled its reservation from the usage it reported.
        usage = await h.admin.fetchval(
            "SELECT sum((payload->'usage'->>'prompt_tokens')::bigint "
            "         + (payload->'usage'->>'completion_tokens')::bigint) "
            "FROM work.ledger_entries WHERE entry_type = 'response'"
        )
        settled = await h.admin.fetchrow(
            "SELECT sum(tokens) AS tokens, sum(cost) AS cost, count(*) AS n FROM work.spend "
            "WHERE state = 'settled'"
        )
        assert settled is not None
        assert (settled["tokens"], settled["n"]) == (usage, statuses["applied"])
        assert view.tokens == usage
        metric = sum(
            s.value for m in registry.collect() for s in m.samples if s.name == "work_tokens_total"
        )
        assert metric == usage
        assert settled["cost"] > Decimal(0)

        change = await budgets.set("acme", Period.DAY, token_limit=100_000)
        assert change.resumed == statuses["parked"]
        await run_until_settled(handler, h.admin)
        assert {r["status"] for r in await h.items()} == {"applied"}
        assert model.total == 12
        assert set(model.keys.values()) == {1}
        history = await h.history()
        assert history.consistent


async def test_a_call_of_unknown_outcome_keeps_its_reservation_and_is_visible_as_such(
    database_url: str, settings: Settings
) -> None:
    """A call that failed after its request left (a timeout, a dropped connection: the provider
    may have done and billed it) keeps its reservation counted in full, and says so: in the
    budget view (API, CLI, console), in the executor's gauges — never silently forgotten."""
    model = ScriptedSynthesizer()
    registry = CollectorRegistry()
    async with (
        harness(database_url) as h,
        executor(
            executor_settings(settings),
            database_url,
            model,
            registry=registry,
            limits=ProviderLimits.parse({"*": {"max_tokens": 200}}),
        ) as handler,
    ):
        budgets = BudgetCommands(h.producer)
        await budgets.set("acme", Period.DAY, token_limit=100_000)
        await h.commands.put_document(PROJECT, DOCUMENT, backlog("Lost answer [transient:1]"))
        await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT, org_id="acme"))
        await run_until_settled(handler, h.admin)
        assert model.total == 2  # attempt 1's outcome is unknown; attempt 2 answered
        spend = await h.admin.fetch(
            "SELECT attempt, state, reserved_tokens, tokens FROM work.spend ORDER BY attempt"
        )
        assert [s["state"] for s in spend] == ["unknown", "settled"]
        view = await budgets.get("acme")
        assert view is not None
        assert (view.unknown, view.unknown_tokens) == (1, spend[0]["reserved_tokens"])
        assert view.tokens == spend[0]["reserved_tokens"] + spend[1]["tokens"]  # counted in full
        out = BudgetOut.of(view)
        assert out.unknown_outcome_reservations == 1
        assert out.unknown_outcome_tokens == spend[0]["reserved_tokens"]
        assert registry.get_sample_value("work_unknown_outcome_reservations") == 1
        assert (
            registry.get_sample_value("work_unknown_outcome_reserved_tokens")
            == spend[0]["reserved_tokens"]
        )
