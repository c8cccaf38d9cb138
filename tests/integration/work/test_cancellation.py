"""Cancelling threads against PostgreSQL: waiting items (queued, waiting for a retry, parked)
end canceled without a call; an item whose call is in flight records its answer and does not
apply it; a leased item that has not started ends without a call; the parent closes; every
step is in the ledger; cancelling again changes nothing, however many ask at once."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from consumers.work_executor.executor import ExecutorConfig, WorkExecutor
from consumers.work_executor.metrics import ExecutorMetrics
from consumers.work_executor.retry import RetryStrategy
from consumers.work_executor.store import Store
from producers.work.budgets import BudgetCommands
from producers.work.cancel import Disposition, cancel_thread
from producers.work.commands import GenerateAll, GenerateEpic
from producers.work.domain.budgets import Period
from producers.work.domain.functions import installed_functions
from producers.work.domain.history import ItemOutcome
from spectral.db.connect import create_pool
from spectral.settings import Settings
from tests.integration.work.support import (
    DOCUMENT,
    PROJECT,
    Harness,
    ScriptedSynthesizer,
    backlog,
    claim,
    executor,
    executor_settings,
    harness,
)

pytestmark = pytest.mark.integration


async def _entries(h: Harness) -> list[dict[str, Any]]:
    rows = await h.admin.fetch(
        "SELECT work_item_id, thread_id, attempt, entry_type, payload::text AS payload "
        "FROM work.ledger_entries ORDER BY seq"
    )
    return [{**dict(r), "payload": json.loads(r["payload"])} for r in rows]


async def _wait_for(admin: asyncpg.Pool, sql: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not await admin.fetchval(sql):
        if time.monotonic() > deadline:
            raise AssertionError(f"never true: {sql}")
        await asyncio.sleep(0.02)


async def test_a_waiting_thread_is_canceled_at_once_without_a_call_and_only_once(
    database_url: str, settings: Settings
) -> None:
    model = ScriptedSynthesizer()
    async with harness(database_url) as h:
        await h.commands.put_document(PROJECT, DOCUMENT, backlog("Checkout"))
        thread = await h.commands.generate_epic(GenerateEpic(PROJECT, DOCUMENT, "E1"))
        result = await cancel_thread(
            h.producer, thread.thread_id, reason="wrong epic", requested_by="token:alice"
        )
        assert (result.disposition, result.status.value) == (Disposition.CANCELED, "canceled")
        assert (result.canceled_items, result.in_flight_items) == (1, 0)
        (item,) = await h.items()
        assert item["status"] == "canceled"
        entries = await _entries(h)
        assert [(e["work_item_id"] is None, e["payload"]["kind"]) for e in entries] == [
            (True, "cancel_requested"),  # the thread's: who and why
            (False, "canceled"),  # the item's: no call was made
        ]
        assert entries[0]["payload"]["requested_by"] == "token:alice"
        assert "wrong epic" in entries[0]["payload"]["message"]
        assert entries[1]["payload"]["disposition"] == "canceled"
        announced = await h.admin.fetchval(
            "SELECT convert_from(envelope, 'UTF8')::jsonb -> 'payload' ->> 'state' "
            "FROM core.outbox WHERE event_type = 'work.item.state_changed'"
        )
        assert announced == "canceled"
        view = await h.reader.thread(thread.thread_id)
        assert view is not None
        assert view.thread.cancel_requested_by == "token:alice"
        # Again: nothing changes, nothing is written.
        again = await cancel_thread(h.producer, thread.thread_id)
        assert again.disposition is Disposition.ALREADY_CLOSED
        assert len(await _entries(h)) == 2
        # No executor ever pays for it.
        async with executor(executor_settings(settings), database_url, model) as handler:
            await handler.sweep_once()
            await handler.drain()
        assert model.total == 0


async def test_a_tree_is_canceled_waiting_items_at_once_the_call_in_flight_recorded_not_applied(
    database_url: str, settings: Settings
) -> None:
    model = ScriptedSynthesizer()
    current = executor_settings(settings, work_retry_base_seconds=60.0)  # E3 waits a minute
    async with (
        harness(database_url) as h,
        executor(current, database_url, model) as handler,
    ):
        await h.commands.put_document(
            PROJECT,
            DOCUMENT,
            backlog("In flight [slow:1.5]", "Waiting", "Flaky [transient:always]"),
        )
        parent = await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT))
        await h.admin.execute(
            "UPDATE work.work_items SET not_before = now() + interval '1 hour' "
            "WHERE input->>'epic_id' = 'E2'"
        )
        await handler.claim_once()
        await _wait_for(
            h.admin,
            "SELECT bool_and(status = CASE input->>'epic_id' WHEN 'E1' THEN 'running' "
            "ELSE status END) AND bool_or(status = 'failed') FROM work.work_items",
        )
        assert model.in_flight == 1  # E1's call runs; E3 failed once and waits; E2 is queued
        result = await cancel_thread(h.producer, parent.thread_id, reason="not needed")
        assert result.disposition is Disposition.CANCELING
        assert (result.canceled_items, result.in_flight_items) == (2, 1)
        await handler.drain()
        await handler.sweep_once()  # settles the parent if the batch did not
        statuses = {
            r["epic"]: (r["status"], r["thread"])
            for r in await h.admin.fetch(
                "SELECT w.input->>'epic_id' AS epic, w.status, t.status AS thread "
                "FROM work.work_items w JOIN work.threads t USING (thread_id)"
            )
        }
        assert statuses == dict.fromkeys(("E1", "E2", "E3"), ("canceled", "canceled"))
        assert await h.thread_status(parent.thread_id) == "canceled"
        assert model.total == 2  # E1 once (its answer kept), E3 once; E2 never
        document = await h.admin.fetchrow("SELECT version FROM work.documents")
        assert document is not None
        assert document["version"] == 1  # nothing applied
        assert await h.admin.fetchval("SELECT count(*) FROM work.mutations") == 0
        history = await h.history()
        assert history.consistent, history.problems
        outcomes = {i.outcome for i in history.items.values()}
        assert outcomes == {ItemOutcome.CANCELED}
        in_flight = await h.admin.fetch(
            "SELECT entry_type FROM work.ledger_entries l JOIN work.work_items w "
            "USING (work_item_id) WHERE w.input->>'epic_id' = 'E1' ORDER BY seq"
        )
        assert [r["entry_type"] for r in in_flight] == ["prompt", "response", "error"]
        spend = await h.admin.fetchrow(
            "SELECT s.state FROM work.spend s JOIN work.work_items w USING (work_item_id) "
            "WHERE w.input->>'epic_id' = 'E1'"
        )
        assert spend is not None
        assert spend["state"] == "settled"  # the answer was paid for: its usage counts
        again = await cancel_thread(h.producer, parent.thread_id)
        assert again.disposition is Disposition.ALREADY_CLOSED


async def test_a_leased_item_that_has_not_started_ends_without_a_call(
    database_url: str, settings: Settings
) -> None:
    model = ScriptedSynthesizer()
    async with harness(database_url) as h:
        await h.commands.put_document(PROJECT, DOCUMENT, backlog("Checkout"))
        thread = await h.commands.generate_epic(GenerateEpic(PROJECT, DOCUMENT, "E1"))
        pool = await create_pool(database_url, role="spectral_executor", max_size=4)
        try:
            jobs = await claim(pool, 1)  # leased, nothing paid
            result = await cancel_thread(h.producer, thread.thread_id)
            assert result.disposition is Disposition.CANCELING
            assert result.in_flight_items == 1
            worker = WorkExecutor(
                Store.over(pool, installed_functions()),
                model,
                RetryStrategy.from_settings(executor_settings(settings)),
                ExecutorMetrics(CollectorRegistry()),
                ExecutorConfig(worker_id="w"),
                functions=installed_functions(),
            )
            await worker.run_batch(jobs)
        finally:
            await pool.close()
        assert model.total == 0
        (item,) = await h.items()
        assert (item["status"], item["attempt"]) == ("canceled", 0)
        assert await h.thread_status(thread.thread_id) == "canceled"
        kinds = [e["entry_type"] for e in await _entries(h)]
        assert "prompt" not in kinds
        released = await h.admin.fetchval("SELECT state FROM work.spend")
        assert released == "released"  # the reservation of an attempt that never started


async def test_many_cancellations_at_once_record_one_request(
    database_url: str, settings: Settings
) -> None:
    async with harness(database_url) as h:
        await h.commands.put_document(PROJECT, DOCUMENT, backlog("A", "B", "C"))
        parent = await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT))
        results = await asyncio.gather(
            *(cancel_thread(h.producer, parent.thread_id) for _ in range(6))
        )
        assert sorted(r.disposition.value for r in results) == [
            "already_closed",
        ] * 5 + ["canceled"]
        requests = await h.admin.fetchval(
            "SELECT count(*) FROM work.ledger_entries WHERE payload->>'kind' = 'cancel_requested'"
        )
        assert requests == 4  # the parent and its three children, once each
        assert {r["status"] for r in await h.items()} == {"canceled"}
        assert await h.thread_status(parent.thread_id) == "canceled"
        view = await h.reader.thread(parent.thread_id)
        assert view is not None
        assert view.child_summary is not None
        assert view.child_summary["canceled"] == 3


async def test_a_parked_item_is_visible_with_its_reason_and_cancels_like_a_waiting_one(
    database_url: str, settings: Settings
) -> None:
    async with harness(database_url) as h:
        await BudgetCommands(h.producer).set("acme", Period.DAY, token_limit=10)
        await h.commands.put_document(PROJECT, DOCUMENT, backlog("Checkout"))
        thread = await h.commands.generate_epic(
            GenerateEpic(PROJECT, DOCUMENT, "E1", org_id="acme")
        )
        pool = await create_pool(database_url, role="spectral_executor", max_size=2)
        try:
            assert await claim(pool, 4) == []  # over budget: parked, not claimed
        finally:
            await pool.close()
        view = await h.reader.thread(thread.thread_id)
        assert view is not None
        (item,) = view.items
        assert item.status.value == "parked"
        assert item.park_reason is not None
        assert "budget of org acme used up" in item.park_reason
        assert item.attempt == 0
        result = await cancel_thread(h.producer, thread.thread_id)
        assert (result.disposition, result.canceled_items) == (Disposition.CANCELED, 1)
        (row,) = await h.items()
        assert row["status"] == "canceled"
