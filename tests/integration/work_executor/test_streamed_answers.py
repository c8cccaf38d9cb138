"""A streamed answer is read up to its call's completion bound (issue 23): against a hostile
streaming gateway that never stops, the executor stops reading at max_tokens, records that in
the ledger, counts it, and settles the call at its reservation — never past it on spectral's
side — with the real database and the fake gateway on loopback."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from producers.work.budgets import BudgetCommands
from producers.work.commands import GenerateAll
from producers.work.domain.budgets import Period
from spectral.settings import Settings
from tests.fakes.openai_server import FakeModelServer
from tests.integration.work.support import (
    DOCUMENT,
    PROJECT,
    backlog,
    gateway_executor,
    run_until_settled,
)

pytestmark = pytest.mark.integration

MAX_TOKENS = 40


async def test_a_stream_that_never_stops_is_cut_at_max_tokens_and_billed_at_its_reservation(
    database_url: str, settings: Settings
) -> None:
    registry = CollectorRegistry()
    with FakeModelServer() as server:
        async with gateway_executor(
            settings,
            database_url,
            server,
            registry=registry,
            limits={"max_tokens": MAX_TOKENS},
            llm_stream=True,
            work_max_attempts=1,
        ) as (h, handler):
            await BudgetCommands(h.producer).set("acme", Period.DAY, token_limit=100_000)
            await h.commands.put_document(PROJECT, DOCUMENT, backlog("Endless [endless]", "Honest"))
            await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT, org_id="acme"))
            await run_until_settled(handler, h.admin, timeout=60)

            rows = await h.admin.fetch(
                "SELECT w.input->>'epic_id' AS epic, w.status, s.state, s.reserved_tokens, "
                "s.tokens, (e.payload->>'stopped_at_bound')::int AS stopped "
                "FROM work.work_items w JOIN work.spend s USING (work_item_id) "
                "JOIN work.ledger_entries e ON e.work_item_id = w.work_item_id "
                "  AND e.entry_type = 'response' ORDER BY epic"
            )
    endless, honest = rows
    # Cut at the bound, recorded, settled at the reservation: billed no more than allowed.
    assert endless["stopped"] == MAX_TOKENS
    assert endless["state"] == "settled"
    assert endless["tokens"] == endless["reserved_tokens"]
    assert endless["status"] == "dead_letter"  # a cut answer is not valid stories
    assert server.stream_closed
    # (the model label is bounded: this executor was configured with no known routes)
    assert registry.get_sample_value("work_streams_stopped_total", {"model": "other"}) == 1
    # An honest stream is read whole and settled from the usage it reported.
    assert honest["stopped"] is None
    assert (honest["status"], honest["state"]) == ("applied", "settled")
    assert honest["tokens"] < honest["reserved_tokens"]
