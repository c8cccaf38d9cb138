"""Reservations left ``unknown`` (a call that failed after its request left: the provider may
have billed it) count in full until the horizon, then the sweep releases them — once, recorded
on the spend row and counted — so they are never silently re-paid nor silently forgotten."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from consumers.work_executor.outcomes import UnknownOutcomePolicy
from producers.work.budgets import BudgetCommands
from producers.work.commands import GenerateAll
from producers.work.domain.budgets import Period
from spectral.llm.limits import ProviderLimits
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

HORIZON = 1.0


async def test_an_unknown_reservation_is_released_once_at_the_horizon(
    database_url: str, settings: Settings
) -> None:
    registry = CollectorRegistry()
    async with (
        harness(database_url) as h,
        executor(
            executor_settings(settings),
            database_url,
            ScriptedSynthesizer(),
            registry=registry,
            limits=ProviderLimits.parse({"*": {"max_tokens": 200}}),
            unknown_outcomes=UnknownOutcomePolicy(horizon_seconds=HORIZON),
        ) as handler,
    ):
        budgets = BudgetCommands(h.producer)
        await budgets.set("acme", Period.DAY, token_limit=100_000)
        await h.commands.put_document(PROJECT, DOCUMENT, backlog("Lost answer [transient:1]"))
        await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT, org_id="acme"))
        await run_until_settled(handler, h.admin)
        spend = await h.admin.fetch(
            "SELECT attempt, state, reserved_tokens, tokens, released_unknown_at "
            "FROM work.spend ORDER BY attempt"
        )
        if [s["state"] for s in spend] == ["unknown", "settled"]:  # not yet past the horizon
            view = await budgets.get("acme")
            assert view is not None
            assert view.tokens == spend[0]["reserved_tokens"] + spend[1]["tokens"]
        await asyncio.sleep(HORIZON)
        await handler.sweep_once()
        await handler.sweep_once()  # a second sweep finds nothing more to release
        spend = await h.admin.fetch(
            "SELECT attempt, state, tokens, released_unknown_at FROM work.spend ORDER BY attempt"
        )
        assert [s["state"] for s in spend] == ["released", "settled"]
        assert spend[0]["released_unknown_at"] is not None
        assert spend[1]["released_unknown_at"] is None
        assert registry.get_sample_value("work_unknown_outcome_released_total") == 1
        assert registry.get_sample_value("work_unknown_outcome_reservations") == 0
        view = await budgets.get("acme")
        assert view is not None
        assert (view.unknown, view.tokens) == (0, spend[1]["tokens"])
