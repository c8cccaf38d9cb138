"""Batches of claimed items against PostgreSQL: items of one document each get their own
mutation and document version in the batch's shared transaction; an answer is recorded as soon
as it arrives, whatever the other calls of its batch still do; a lost lease and a bad answer
fail their own item only."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from consumers.work_executor.executor import ExecutorConfig, WorkExecutor
from consumers.work_executor.metrics import AttemptOutcome, ExecutorMetrics
from consumers.work_executor.parents import ParentSettlement
from consumers.work_executor.pool import Job
from consumers.work_executor.reads import ExecutorReads, LoadedBatch
from consumers.work_executor.retry import RetryStrategy
from consumers.work_executor.store import Store
from consumers.work_executor.transitions import BatchWrite, BatchWritten, Transitions
from producers.work.commands import GenerateAll
from producers.work.domain.functions import installed_functions
from producers.work.domain.model import EntryType
from producers.work.domain.payloads import response_content
from producers.work.domain.story.prompts import render_story_prompt
from spectral.db.connect import create_pool
from spectral.llm.seam import SynthesisRequest, SynthesisResponse
from spectral.settings import Settings
from tests.integration.work.support import (
    DOCUMENT,
    PROJECT,
    ScriptedSynthesizer,
    backlog,
    claim,
    executor_settings,
    harness,
)

pytestmark = pytest.mark.integration


@asynccontextmanager
async def _worker(settings: Settings, database_url: str, model: Any) -> AsyncIterator[WorkExecutor]:
    """The executor alone: no consumer, no sweeper, no pool — the test hands it batches."""
    pool = await create_pool(database_url, role="spectral_executor", max_size=4)
    try:
        yield WorkExecutor(
            Store.over(pool, installed_functions()),
            model,
            RetryStrategy.from_settings(settings),
            ExecutorMetrics(CollectorRegistry()),
            ExecutorConfig(worker_id="batches"),
            functions=installed_functions(),
        )
    finally:
        await pool.close()


@asynccontextmanager
async def _claimed(database_url: str, count: int) -> AsyncIterator[list[Job]]:
    """Claim ``count`` due items under one lease token, as a delivery batch would."""
    pool = await create_pool(database_url, role="spectral_executor")
    try:
        jobs = await claim(pool, count)
        assert len(jobs) == count
        yield jobs
    finally:
        await pool.close()


async def _epics(admin: asyncpg.Pool) -> dict[UUID, str]:
    rows = await admin.fetch("SELECT work_item_id, input->>'epic_id' AS epic FROM work.work_items")
    return {r["work_item_id"]: r["epic"] for r in rows}


async def test_items_of_one_document_get_a_mutation_and_a_version_each(
    database_url: str, settings: Settings
) -> None:
    model = ScriptedSynthesizer()
    titles = [f"Epic {n}" for n in range(6)]
    async with (
        harness(database_url) as h,
        _worker(executor_settings(settings), database_url, model) as worker,
    ):
        await h.commands.put_document(PROJECT, DOCUMENT, backlog(*titles))
        parent = await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT))
        async with _claimed(database_url, 6) as jobs:
            outcomes = await worker.run_batch(jobs)
        assert set(outcomes.values()) == {AttemptOutcome.SUCCESS}
        assert model.total == 6
        assert await h.thread_status(parent.thread_id) == "complete"  # settled after the batch
        document = await h.admin.fetchrow("SELECT version FROM work.documents")
        assert document is not None
        assert document["version"] == 7
        mutations = await h.admin.fetch(
            "SELECT m.base_version, m.result_version, m.mutation_id, w.input->>'epic_id' AS epic "
            "FROM work.mutations m JOIN work.work_items w USING (work_item_id) "
            "ORDER BY m.base_version"
        )
        assert [(m["base_version"], m["result_version"]) for m in mutations] == [
            (n, n + 1) for n in range(1, 7)
        ]
        versions = await h.admin.fetch(
            "SELECT version, mutation_id, content::text AS content FROM work.document_versions "
            "ORDER BY version"
        )
        assert [v["version"] for v in versions] == list(range(1, 8))
        for number, (version, mutation) in enumerate(zip(versions[1:], mutations, strict=True)):
            assert version["mutation_id"] == mutation["mutation_id"]
            content = json.loads(version["content"])
            with_stories = sorted(e for e, epic in content["epics"].items() if epic["stories"])
            # Version n+1 holds the stories of the first n mutations, in the order applied.
            assert with_stories == sorted(m["epic"] for m in mutations[: number + 1])
        reports = await h.admin.fetch(
            "SELECT payload->>'base_version' AS base, payload->>'result_version' AS result "
            "FROM work.ledger_entries WHERE entry_type = 'mutation_report' ORDER BY base"
        )
        assert [(int(r["base"]), int(r["result"])) for r in reports] == [
            (n, n + 1) for n in range(1, 7)
        ]
        history = await h.history()
        assert history.consistent, history.problems


class _StealingSynthesizer(ScriptedSynthesizer):
    """While the call of ``victim`` runs, another worker re-claims its lease (as the stale-lease
    recovery would)."""

    def __init__(self, admin: asyncpg.Pool) -> None:
        super().__init__()
        self.admin = admin
        self.victim: UUID | None = None

    async def synthesize(self, request: SynthesisRequest) -> SynthesisResponse:
        if request.idempotency_key.startswith(str(self.victim)):
            await self.admin.execute(
                "UPDATE work.work_items SET lease_token = $2, leased_by = 'thief' "
                "WHERE work_item_id = $1",
                self.victim,
                uuid4(),
            )
        return await super().synthesize(request)


async def test_a_lease_lost_mid_call_skips_that_item_only_and_keeps_its_paid_answer(
    database_url: str, settings: Settings
) -> None:
    async with harness(database_url) as h:
        model = _StealingSynthesizer(h.admin)
        async with _worker(executor_settings(settings), database_url, model) as worker:
            await h.commands.put_document(PROJECT, DOCUMENT, backlog("A", "B", "C"))
            await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT))
            async with _claimed(database_url, 3) as jobs:
                model.victim = jobs[1][0]
                outcomes = await worker.run_batch(jobs)
        assert outcomes[jobs[1]] is AttemptOutcome.SKIPPED
        assert [outcomes[jobs[0]], outcomes[jobs[2]]] == [AttemptOutcome.SUCCESS] * 2
        statuses = {r["work_item_id"]: r["status"] for r in await h.items()}
        assert statuses[jobs[1][0]] == "running"  # still the thief's
        assert {statuses[jobs[0][0]], statuses[jobs[2][0]]} == {"applied"}
        entries = await h.admin.fetch(
            "SELECT entry_type FROM work.ledger_entries WHERE work_item_id = $1 ORDER BY seq",
            jobs[1][0],
        )
        # The answer was paid for: it is recorded for the lease's new holder to reuse.
        assert [e["entry_type"] for e in entries] == ["prompt", "response"]
        document = await h.admin.fetchrow("SELECT version FROM work.documents")
        assert document is not None
        assert document["version"] == 3


async def test_an_answer_is_recorded_and_applied_without_waiting_for_slow_calls(
    database_url: str, settings: Settings
) -> None:
    model = ScriptedSynthesizer()
    async with (
        harness(database_url) as h,
        _worker(executor_settings(settings), database_url, model) as worker,
    ):
        # The slow call outlasts the fast item's whole path by far: on a machine busy with the
        # suite's other workers, recording and applying an answer has taken over half a second.
        await h.commands.put_document(PROJECT, DOCUMENT, backlog("Fast", "Slow [slow:3]"))
        await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT))
        async with _claimed(database_url, 2) as jobs:
            outcomes = await worker.run_batch(jobs)
        assert set(outcomes.values()) == {AttemptOutcome.SUCCESS}
        epics = await _epics(h.admin)
        rows = await h.admin.fetch(
            "SELECT l.work_item_id, l.created_at, w.finished_at FROM work.ledger_entries l "
            "JOIN work.work_items w USING (work_item_id) WHERE l.entry_type = 'response'"
        )
        by_epic: dict[str, Any] = {epics[r["work_item_id"]]: r for r in rows}
        fast, slow = by_epic["E1"], by_epic["E2"]
        # The fast item's answer was recorded, and its mutation applied, while the slow call ran.
        assert (slow["created_at"] - fast["created_at"]).total_seconds() > 1.0
        assert (slow["created_at"] - fast["finished_at"]).total_seconds() > 1.0


class _NulSynthesizer(ScriptedSynthesizer):
    """Answers items titled ``[nul]`` with text PostgreSQL cannot store in a jsonb value."""

    async def synthesize(self, request: SynthesisRequest) -> SynthesisResponse:
        response = await super().synthesize(request)
        if "[nul]" in request.prompt:
            return SynthesisResponse(content=response.content + "\x00", model=response.model)
        return response


async def test_an_answer_the_database_cannot_store_as_is_is_kept_and_fails_its_own_item_only(
    database_url: str, settings: Settings
) -> None:
    model = _NulSynthesizer()
    async with (
        harness(database_url) as h,
        _worker(executor_settings(settings), database_url, model) as worker,
    ):
        await h.commands.put_document(PROJECT, DOCUMENT, backlog("A", "Bad [nul]", "C"))
        await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT))
        async with _claimed(database_url, 3) as jobs:
            outcomes = await worker.run_batch(jobs)
        epics = await _epics(h.admin)
        by_epic = {epics[item]: outcomes[(item, token)] for item, token in jobs}
        assert by_epic == {
            "E1": AttemptOutcome.SUCCESS,
            "E2": AttemptOutcome.PERMANENT_FAILURE,  # its answer is not valid JSON
            "E3": AttemptOutcome.SUCCESS,
        }
        statuses = {epics[r["work_item_id"]]: r["status"] for r in await h.items()}
        assert statuses == {"E1": "applied", "E2": "dead_letter", "E3": "applied"}
        assert model.total == 3  # one paid call each, none paid again
        bad = next(item for item, epic in epics.items() if epic == "E2")
        history = await h.history()
        assert history.consistent, history.problems
        (response,) = [e for e in history.items[bad].entries if e.entry_type is EntryType.RESPONSE]
        # Kept losslessly: the exact answer, U+0000 included, can be read back.
        content = response_content(response.payload)
        assert content is not None
        assert content.endswith("\x00")
        assert response.payload["content_encoding"] == "utf-8+surrogatepass/base64"


class _Victim:
    """The item whose reads or writes the database refuses (for a data reason)."""

    def __init__(self, step: str) -> None:
        self.item: UUID | None = None
        self.step = step

    def hit(self, step: str, ids: Sequence[UUID]) -> bool:
        return self.step == step and self.item in ids


class _RefusingTransitions(Transitions):
    def __init__(self, pool: asyncpg.Pool, victim: _Victim) -> None:
        super().__init__(pool, installed_functions())
        self._victim = victim

    async def write(self, batch: BatchWrite) -> BatchWritten:
        if self._victim.hit("apply", [a.loaded.item.work_item_id for a in batch.applies]):
            raise asyncpg.exceptions.UntranslatableCharacterError("\\u0000 cannot be stored")
        return await super().write(batch)


class _RefusingReads(ExecutorReads):
    def __init__(self, pool: asyncpg.Pool, victim: _Victim) -> None:
        super().__init__(pool)
        self._victim = victim

    async def load_batch(self, item_ids: Sequence[UUID]) -> LoadedBatch:
        if self._victim.hit("load", item_ids):
            raise RecursionError("maximum recursion depth exceeded")
        return await super().load_batch(item_ids)


@pytest.mark.parametrize("step", ["apply", "load", "plan"])
async def test_a_failure_of_one_item_at_any_step_dead_letters_it_alone(
    database_url: str, settings: Settings, step: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = ScriptedSynthesizer()
    async with harness(database_url) as h:
        pool = await create_pool(database_url, role="spectral_executor", max_size=4)
        victim = _Victim(step)
        store = Store(
            _RefusingReads(pool, victim), _RefusingTransitions(pool, victim), ParentSettlement(pool)
        )
        worker = WorkExecutor(
            store,
            model,
            RetryStrategy.from_settings(executor_settings(settings)),
            ExecutorMetrics(CollectorRegistry()),
            ExecutorConfig(worker_id="refusing"),
            functions=installed_functions(),
        )
        try:
            await h.commands.put_document(PROJECT, DOCUMENT, backlog("A", "Victim", "C"))
            parent = await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT))
            epics = await _epics(h.admin)
            victim.item = next(item for item, epic in epics.items() if epic == "E2")
            if step == "plan":

                def refuse(*, epic_id: str, **kwargs: Any) -> Any:
                    if epic_id == "E2":
                        raise ValueError("an exception nobody foresaw")
                    return render_story_prompt(epic_id=epic_id, **kwargs)

                monkeypatch.setattr(
                    "producers.work.domain.story.function.render_story_prompt", refuse
                )
            async with _claimed(database_url, 3) as jobs:
                outcomes = await worker.run_batch(jobs)
        finally:
            await pool.close()
        by_epic = {epics[item]: outcomes[(item, token)] for item, token in jobs}
        assert by_epic == {
            "E1": AttemptOutcome.SUCCESS,
            "E2": AttemptOutcome.PERMANENT_FAILURE,
            "E3": AttemptOutcome.SUCCESS,
        }
        statuses = {epics[r["work_item_id"]]: r["status"] for r in await h.items()}
        assert statuses == {"E1": "applied", "E2": "dead_letter", "E3": "applied"}
        assert await h.thread_status(parent.thread_id) == "failed"  # closed all the same
        # Paid only where a call was made: once per item, never again.
        assert model.total == (2 if step in ("load", "plan") else 3)
        assert set(model.keys.values()) == {1}
        error = await h.admin.fetchval(
            "SELECT payload->>'message' FROM work.ledger_entries "
            "WHERE work_item_id = $1 AND entry_type = 'error'",
            victim.item,
        )
        assert error, "the dead letter says why"
        history = await h.history()
        assert history.consistent, history.problems
