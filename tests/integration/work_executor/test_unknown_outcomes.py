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


async def test_a_call_that_times_out_is_reissued_under_its_key_within_the_lease_and_paid_once(
    database_url: str, settings: Settings
) -> None:
    """A call that takes longer than the model timeout, its worker alive: the call is sent
    again under the same idempotency key, in the same attempt, against the same reservation.
    A gateway that honours keys (it finishes the first call and answers the repeat with its
    answer) bills it once; the answer settles the reservation once and is applied; the ledger
    records the re-issue. Without re-issues, each attempt's new key is billed again."""
    registry = CollectorRegistry()
    with FakeModelServer(idempotent=True) as gateway:
        async with gateway_executor(
            settings,
            database_url,
            gateway,
            registry=registry,
            limits={"max_tokens": 200},
            llm_timeout_seconds=1.0,
        ) as (h, handler):
            await h.commands.put_document(PROJECT, DOCUMENT, backlog("Slow [slow:1.6]"))
            await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT))
            await run_until_settled(handler, h.admin)
            item = await h.admin.fetchrow(
                "SELECT work_item_id, status, attempt FROM work.work_items"
            )
            spend = await h.admin.fetch("SELECT attempt, state, reissues FROM work.spend")
            errors = await h.admin.fetch(
                "SELECT attempt, payload->>'message' AS message, "
                "payload->>'disposition' AS disposition "
                "FROM work.ledger_entries WHERE entry_type = 'error'"
            )
    assert item is not None
    assert (item["status"], item["attempt"]) == ("applied", 1)
    key = f"{item['work_item_id']}:1"
    calls = [c.idempotency_key for c in gateway.snapshot()]
    assert calls == [key, key]  # sent twice, under one key
    assert gateway.answered == [key]  # billed once
    assert [(s["attempt"], s["state"], s["reissues"]) for s in spend] == [(1, "settled", 1)]
    assert [(e["attempt"], e["disposition"]) for e in errors] == [(1, "reissue")]
    assert "timed out" in errors[0]["message"]
    assert registry.get_sample_value("work_unknown_outcome_reissues_total") == 1
