"""The executor against PostgreSQL, driven by explicit sweeps (the Kafka path is in
test_through_kafka.py): lease before paid work, ledger order, retries with backoff, dead
letters that block nothing else, recovery of stale leases, reuse of recorded responses."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from consumers.work_executor.outcomes import UnknownOutcomePolicy
from consumers.work_executor.store import Store
from producers.work.commands import GenerateAll, GenerateEpic
from producers.work.domain.functions import installed_functions
from producers.work.domain.history import ItemOutcome
from producers.work.domain.model import EntryType
from spectral.db.connect import create_pool
from spectral.llm.seam import SynthesisRequest, SynthesisResponse
from spectral.settings import Settings
from tests.integration.work.support import (
    DOCUMENT,
    PROJECT,
    ScriptedSynthesizer,
    backlog,
    claim,
    executor,
    executor_settings,
    harness,
    run_until_settled,
)

pytestmark = pytest.mark.integration


async def test_an_item_runs_prompt_response_parse_mutation_and_closes_its_thread(
    database_url: str, settings: Settings
) -> None:
    model = ScriptedSynthesizer()
    async with (
        harness(database_url) as h,
        executor(executor_settings(settings), database_url, model) as handler,
    ):
        await h.commands.put_document(PROJECT, DOCUMENT, backlog("Checkout"))
        thread = await h.commands.generate_epic(GenerateEpic(PROJECT, DOCUMENT, "E1"))
        await run_until_settled(handler, h.admin)
        (item,) = await h.items()
        assert (item["status"], item["attempt"]) == ("applied", 1)
        assert await h.thread_status(thread.thread_id) == "complete"
        assert model.total == 1
        ledger = await h.reader.thread_ledger(thread.thread_id)
        assert ledger is not None
        assert [e.entry_type for e in ledger] == [
            EntryType.PROMPT,
            EntryType.RESPONSE,
            EntryType.PARSE_REPORT,
            EntryType.MUTATION_REPORT,
        ]
        assert ledger[0].payload["idempotency_key"] == f"{item['work_item_id']}:1"
        document: Any = await h.admin.fetchrow(
            "SELECT version, content::text AS content FROM work.documents"
        )
        assert document["version"] == 2
        stories = json.loads(document["content"])["epics"]["E1"]["stories"]
        assert stories
        assert stories[0]["story_key"] == "E1-1"
        mutation = await h.admin.fetchrow("SELECT * FROM work.mutations")
        assert mutation is not None
        assert (mutation["base_version"], mutation["result_version"]) == (1, 2)
        history = await h.history()
        assert history.consistent
        assert [i.outcome for i in history.items.values()] == [ItemOutcome.APPLIED]
        # Every step announced itself through the outbox, in the same transactions.
        assert await h.outbox_count("work.ledger.entry_appended") == 4
        assert await h.outbox_count("work.item.state_changed") == 2  # running, applied


async def test_two_executors_on_the_same_items_pay_once_per_item(
    database_url: str, settings: Settings
) -> None:
    model = ScriptedSynthesizer()
    titles = [f"Epic {n} [slow:0.2]" for n in range(8)]
    async with (
        harness(database_url) as h,
        executor(executor_settings(settings), database_url, model, worker="a") as one,
        executor(executor_settings(settings), database_url, model, worker="b") as two,
    ):
        await h.commands.put_document(PROJECT, DOCUMENT, backlog(*titles))
        await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT))
        await asyncio.gather(run_until_settled(one, h.admin), run_until_settled(two, h.admin))
        items = await h.items()
        assert {i["status"] for i in items} == {"applied"}
        assert len(items) == 8
        assert model.total == 8
        assert set(model.keys.values()) == {1}
        leased_by = await h.admin.fetch(
            "SELECT DISTINCT payload->>'idempotency_key' AS k FROM work.ledger_entries "
            "WHERE entry_type = 'prompt'"
        )
        assert len(leased_by) == 8


async def test_transient_failures_back_off_then_succeed(
    database_url: str, settings: Settings
) -> None:
    model = ScriptedSynthesizer()
    async with (
        harness(database_url) as h,
        executor(
            executor_settings(settings, work_retry_base_seconds=0.3), database_url, model
        ) as handler,
    ):
        await h.commands.put_document(PROJECT, DOCUMENT, backlog("Flaky [transient:2]"))
        await h.commands.generate_epic(GenerateEpic(PROJECT, DOCUMENT, "E1"))
        await run_until_settled(handler, h.admin)
        (item,) = await h.items()
        assert (item["status"], item["attempt"]) == ("applied", 3)
        assert model.total == 3
        errors = await h.admin.fetch(
            "SELECT attempt, payload::text AS payload, created_at FROM work.ledger_entries "
            "WHERE entry_type = 'error' ORDER BY attempt"
        )
        waits = []
        for row in errors:
            payload = json.loads(row["payload"])
            assert payload["disposition"] == "retry"
            not_before = datetime.fromisoformat(payload["not_before"])
            waits.append((not_before - row["created_at"]).total_seconds())
        # min(base * 2^(n-1), base * 10): 0.3 s after attempt 1, 0.6 s after attempt 2.
        assert [round(w, 1) for w in waits] == [0.3, 0.6]
        prompts = await h.admin.fetch(
            "SELECT attempt, created_at FROM work.ledger_entries WHERE entry_type = 'prompt' "
            "ORDER BY attempt"
        )
        gaps = [
            (prompts[n + 1]["created_at"] - errors[n]["created_at"]).total_seconds()
            for n in range(2)
        ]
        assert gaps[0] >= 0.3
        assert gaps[1] >= 0.6
        # The retries were delivered as delayed outbox events for attempts 2 and 3.
        delayed = await h.admin.fetch(
            "SELECT idempotency_key, available_at FROM core.outbox "
            "WHERE event_type = 'work.item.enqueued' ORDER BY id"
        )
        assert [r["idempotency_key"].split(":")[1] for r in delayed] == ["1", "2", "3"]
        assert delayed[1]["available_at"] > delayed[0]["available_at"]


async def test_the_attempt_limit_dead_letters_and_blocks_nothing_else(
    database_url: str, settings: Settings
) -> None:
    model = ScriptedSynthesizer()
    registry = CollectorRegistry()
    async with (
        harness(database_url) as h,
        executor(
            executor_settings(settings, work_retry_base_seconds=0.05),
            database_url,
            model,
            registry=registry,
        ) as handler,
    ):
        await h.commands.put_document(
            PROJECT,
            DOCUMENT,
            backlog("Down [transient:always]", "Fine", "Refused [permanent]", "Garbage [invalid]"),
        )
        parent = await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT))
        await run_until_settled(handler, h.admin)
        by_epic = {
            r["epic"]: r
            for r in await h.admin.fetch(
                "SELECT w.input->>'epic_id' AS epic, w.status, w.attempt, t.status AS thread "
                "FROM work.work_items w JOIN work.threads t USING (thread_id)"
            )
        }
        assert {e: (r["status"], r["attempt"], r["thread"]) for e, r in by_epic.items()} == {
            "E1": ("dead_letter", 3, "failed"),  # 3 attempts, then given up
            "E2": ("applied", 1, "complete"),  # its siblings' failures did not block it
            "E3": ("dead_letter", 1, "failed"),  # permanent: no retry
            "E4": ("dead_letter", 1, "failed"),  # invalid answer: parse_report + error
        }
        assert model.total == 3 + 1 + 1 + 1
        view = await h.reader.thread(parent.thread_id)
        assert view is not None
        assert view.thread.status.value == "failed"  # closed once every child was terminal
        assert view.child_summary is not None
        assert (view.child_summary["complete"], view.child_summary["failed"]) == (1, 3)
        history = await h.history()
        assert history.consistent
        outcomes = sorted(i.outcome.value for i in history.items.values())
        assert outcomes == ["applied", "dead_letter", "dead_letter", "dead_letter"]
        last_error = await h.admin.fetchval(
            "SELECT payload->>'dead_letter_reason' FROM work.ledger_entries l "
            "JOIN work.work_items w USING (work_item_id) "
            "WHERE w.input->>'epic_id' = 'E1' AND entry_type = 'error' ORDER BY seq DESC LIMIT 1"
        )
        assert last_error == "max_attempts_exceeded"
        value = registry.get_sample_value
        assert value("work_dead_letter_items") == 3
        assert value("work_queue_depth", {"status": "queued"}) == 0
        assert value("work_dead_letters_total", {"reason": "max_attempts_exceeded"}) == 1
        assert value("work_dead_letters_total", {"reason": "permanent_failure"}) == 1
        assert value("work_dead_letters_total", {"reason": "invalid_output"}) == 1
        assert value("synthesis_failures_total", {"reason": "max_attempts_exceeded"}) == 1
        assert value("synthesis_failures_total", {"reason": "invalid_json"}) == 1
        assert value("synthesis_attempts_total", {"outcome": "transient_failure"}) == 2


async def test_stop_on_error_cancels_siblings_that_have_not_started(
    database_url: str, settings: Settings
) -> None:
    model = ScriptedSynthesizer()
    async with (
        harness(database_url) as h,
        executor(executor_settings(settings, work_pool_size=1), database_url, model) as handler,
    ):
        await h.commands.put_document(PROJECT, DOCUMENT, backlog("Refused [permanent]", "B", "C"))
        parent = await h.commands.generate_all(
            GenerateAll(PROJECT, DOCUMENT, continue_on_error=False)
        )
        # Only E1 is due now: the failure must cancel E2 and E3 before they are claimed.
        await h.admin.execute(
            "UPDATE work.work_items SET not_before = now() + interval '1 hour' "
            "WHERE input->>'epic_id' <> 'E1'"
        )
        await run_until_settled(handler, h.admin)
        statuses = {
            r["epic"]: (r["status"], r["thread"])
            for r in await h.admin.fetch(
                "SELECT w.input->>'epic_id' AS epic, w.status, t.status AS thread "
                "FROM work.work_items w JOIN work.threads t USING (thread_id)"
            )
        }
        assert statuses == {
            "E1": ("dead_letter", "failed"),
            "E2": ("canceled", "canceled"),
            "E3": ("canceled", "canceled"),
        }
        assert model.total == 1
        assert await h.thread_status(parent.thread_id) == "failed"


class _Answering:
    """A gateway that answers any request with E1's stories, counting keys."""

    def __init__(self) -> None:
        self.requests: list[SynthesisRequest] = []

    async def synthesize(self, request: SynthesisRequest) -> SynthesisResponse:
        self.requests.append(request)
        content = json.dumps({"stories": [{"story_key": "E1-1", "title": "As a user I can pay"}]})
        return SynthesisResponse(content=content, model="m", usage={"completion_tokens": 9})


async def test_a_stale_lease_after_a_crash_mid_call_reissues_the_recorded_call_under_its_key(
    database_url: str, settings: Settings
) -> None:
    """The outcome of a call whose worker died is unknown: by default the same call (the
    recorded prompt, the same idempotency key, the same attempt) is sent again."""
    model = _Answering()
    async with harness(database_url) as h:
        await h.commands.put_document(PROJECT, DOCUMENT, backlog("Checkout"))
        await h.commands.generate_epic(GenerateEpic(PROJECT, DOCUMENT, "E1"))
        (item,) = await h.items()
        await _crash_after(database_url, item["work_item_id"], respond=False)
        async with executor(
            executor_settings(settings), database_url, model, lease_timeout=0.5
        ) as handler:
            await asyncio.sleep(0.6)
            await run_until_settled(handler, h.admin)
        (item,) = await h.items()
        assert (item["status"], item["attempt"]) == ("applied", 1)
        assert [(r.prompt, r.idempotency_key) for r in model.requests] == [("p", "k")]
        kinds = await h.admin.fetch(
            "SELECT attempt, entry_type, payload->>'kind' AS kind, "
            "payload->>'disposition' AS disposition FROM work.ledger_entries ORDER BY seq"
        )
        assert [(r["attempt"], r["entry_type"], r["kind"], r["disposition"]) for r in kinds] == [
            (1, "prompt", None, None),
            (1, "error", "outcome_unknown", "reissue"),
            (1, "response", None, None),
            (1, "parse_report", None, None),
            (1, "mutation_report", None, None),
        ]
        spend = await h.admin.fetch("SELECT attempt, state, tokens, reissues FROM work.spend")
        assert [tuple(s) for s in spend] == [(1, "settled", 9, 1)]
        assert (await h.history()).consistent


async def test_a_stale_lease_after_a_crash_mid_call_counts_the_attempt_and_retries(
    database_url: str, settings: Settings
) -> None:
    """Under the ``release`` policy the unknown attempt is used up: a new attempt, a new key."""
    model = ScriptedSynthesizer()
    async with harness(database_url) as h:
        await h.commands.put_document(PROJECT, DOCUMENT, backlog("Checkout"))
        await h.commands.generate_epic(GenerateEpic(PROJECT, DOCUMENT, "E1"))
        (item,) = await h.items()
        await _crash_after(database_url, item["work_item_id"], respond=False)
        async with executor(
            executor_settings(settings, work_retry_base_seconds=0.05),
            database_url,
            model,
            lease_timeout=0.5,
            unknown_outcomes=UnknownOutcomePolicy(reissue=False),
        ) as handler:
            await asyncio.sleep(0.6)
            await run_until_settled(handler, h.admin)
        (item,) = await h.items()
        assert (item["status"], item["attempt"]) == ("applied", 2)
        assert model.total == 1  # attempt 1 was "paid" by the dead worker, attempt 2 here
        assert list(model.keys) == [f"{item['work_item_id']}:2"]
        kinds = await h.admin.fetch(
            "SELECT attempt, entry_type, payload->>'kind' AS kind FROM work.ledger_entries "
            "ORDER BY seq"
        )
        assert [(r["attempt"], r["entry_type"], r["kind"]) for r in kinds] == [
            (1, "prompt", None),
            (1, "error", "outcome_unknown"),
            (2, "prompt", None),
            (2, "response", None),
            (2, "parse_report", None),
            (2, "mutation_report", None),
        ]


async def test_a_recorded_response_is_reused_after_a_crash_instead_of_paying_again(
    database_url: str, settings: Settings
) -> None:
    model = ScriptedSynthesizer()
    async with harness(database_url) as h:
        await h.commands.put_document(PROJECT, DOCUMENT, backlog("Checkout"))
        await h.commands.generate_epic(GenerateEpic(PROJECT, DOCUMENT, "E1"))
        (item,) = await h.items()
        await _crash_after(database_url, item["work_item_id"], respond=True)
        async with executor(
            executor_settings(settings), database_url, model, lease_timeout=0.5
        ) as handler:
            await asyncio.sleep(0.6)
            await run_until_settled(handler, h.admin)
        (item,) = await h.items()
        assert (item["status"], item["attempt"]) == ("applied", 1)
        assert model.total == 0
        history = await h.history()
        assert history.consistent
        (only,) = history.items.values()
        assert (only.paid_calls, only.outcome) == (1, ItemOutcome.APPLIED)


async def test_the_last_attempt_lost_in_a_crash_dead_letters_without_another_call(
    database_url: str, settings: Settings
) -> None:
    model = ScriptedSynthesizer()
    async with harness(database_url) as h:
        await h.commands.put_document(PROJECT, DOCUMENT, backlog("Checkout"))
        await h.commands.generate_epic(GenerateEpic(PROJECT, DOCUMENT, "E1"))
        (item,) = await h.items()
        await h.admin.execute("UPDATE work.work_items SET attempt = 2")  # two attempts used
        await _crash_after(database_url, item["work_item_id"], respond=False, attempt=3)
        async with executor(  # not re-issued: the last attempt is used up
            executor_settings(settings),
            database_url,
            model,
            lease_timeout=0.5,
            unknown_outcomes=UnknownOutcomePolicy(reissue=False),
        ) as handler:
            await asyncio.sleep(0.6)
            await run_until_settled(handler, h.admin)
        (item,) = await h.items()
        assert (item["status"], item["attempt"]) == ("dead_letter", 3)
        assert model.total == 0


async def _crash_after(database_url: str, item_id: Any, *, respond: bool, attempt: int = 1) -> None:
    """Do what a worker does up to the paid call (and its response), then vanish."""
    pool = await create_pool(database_url, role="spectral_executor")
    try:
        store = Store.over(pool, installed_functions())
        ((claimed, token),) = await claim(pool, 1, "dead-worker")
        assert claimed == item_id
        loaded = await store.reads.load(item_id)
        assert loaded is not None
        await store.transitions.start_attempt(
            loaded, token, attempt, {"prompt": "p", "idempotency_key": "k"}
        )
        if respond:
            content = json.dumps(
                {"stories": [{"story_key": "E1-1", "title": "As a user I can pay"}]}
            )
            await store.transitions.record_response(
                loaded, attempt, {"content": content, "model": "m", "usage": {}, "duration_ms": 1}
            )
    finally:
        await pool.close()
