"""Pure parts of the executor and the commands: the ledger-driven plan (unknown-outcome rule),
answer validation, prompts, the command policy, the metric label sets, the worker pool."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from uuid import UUID

import pytest
from hypothesis import given, settings
from prometheus_client import CollectorRegistry

from consumers.work_executor.calls import classify_call_failure
from consumers.work_executor.metrics import (
    DURATION_BUCKETS,
    AttemptOutcome,
    ExecutorMetrics,
    FailureReason,
)
from consumers.work_executor.plan import Exhausted, Reuse, Start, Unknown, next_step
from consumers.work_executor.pool import Job, JobDone, WorkerPool
from consumers.work_executor.recorder import GroupCommit
from consumers.work_executor.retry import FailureKind, RetryStrategy
from producers.work.domain.documents import Epic
from producers.work.domain.hashing import canonical_text, content_hash
from producers.work.domain.model import EntryType, LedgerEntry, ThreadStatus
from producers.work.domain.story.prompts import render_story_prompt
from producers.work.domain.story.validation import MAX_ANSWER_CHARS, parse_report
from producers.work.policy import Action, ChildAction, decide, decide_child
from spectral.db.storable import is_storable
from spectral.errors import PermanentError, TransientError
from spectral.llm.router import RouteError
from tests.hostile_answers import ANSWER_CONTENT, deep

ITEM = uuid.UUID(int=7)
POLICY = RetryStrategy(max_attempts=3)


def _e(seq: int, attempt: int, entry_type: EntryType, **payload: object) -> LedgerEntry:
    return LedgerEntry(
        entry_id=uuid.uuid4(),
        seq=seq,
        thread_id=UUID(int=1),
        work_item_id=ITEM,
        attempt=attempt,
        entry_type=entry_type,
        payload=payload,
        hash=content_hash(payload),
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )


# -- the plan: what a new lease holder does, read from the ledger -----------------------------


def test_a_fresh_item_starts_attempt_one() -> None:
    assert next_step(0, [], POLICY) == Start(1)


def test_a_prompt_without_response_or_error_is_an_unknown_outcome() -> None:
    assert next_step(1, [_e(1, 1, EntryType.PROMPT)], POLICY) == Unknown(1, 0, {})


def test_a_recorded_response_is_reused_never_paid_again() -> None:
    entries = [_e(1, 1, EntryType.PROMPT), _e(2, 1, EntryType.RESPONSE, content="{}")]
    assert next_step(1, entries, POLICY) == Reuse(1, "{}")


def test_a_late_answer_of_an_attempt_declared_unknown_is_reused() -> None:
    entries = [
        _e(1, 1, EntryType.PROMPT),
        _e(2, 1, EntryType.ERROR, kind="outcome_unknown"),
        _e(3, 1, EntryType.RESPONSE, content="late"),
    ]
    assert next_step(1, entries, POLICY) == Reuse(1, "late")


def test_a_consumed_response_is_not_reused_and_a_known_failure_moves_on() -> None:
    entries = [
        _e(1, 1, EntryType.PROMPT),
        _e(2, 1, EntryType.ERROR, kind="transient"),
        _e(3, 2, EntryType.PROMPT),
        _e(4, 2, EntryType.ERROR, kind="transient"),
    ]
    assert next_step(2, entries, POLICY) == Start(3)
    third = [*entries, _e(5, 3, EntryType.PROMPT), _e(6, 3, EntryType.ERROR, kind="transient")]
    assert next_step(3, third, POLICY) == Exhausted(3)
    parsed = [
        _e(1, 1, EntryType.PROMPT),
        _e(2, 1, EntryType.RESPONSE, content="x"),
        _e(3, 1, EntryType.PARSE_REPORT, ok=False),
    ]
    assert next_step(1, parsed, POLICY) == Start(2)


def test_the_last_attempt_lost_is_unknown_then_exhausted() -> None:
    entries = [_e(1, 3, EntryType.PROMPT)]
    assert next_step(3, entries, POLICY) == Unknown(3, 0, {})
    assert next_step(3, [*entries, _e(2, 3, EntryType.ERROR)], POLICY) == Exhausted(3)


# -- validation ------------------------------------------------------------------------------


def _answer(*keys: str) -> str:
    return json.dumps({"stories": [{"story_key": k, "title": f"Story {k}"} for k in keys]})


def test_a_valid_answer_passes_with_unknown_fields_ignored() -> None:
    report = parse_report(json.dumps({**json.loads(_answer("a", "b")), "generated_at": "x"}))
    assert report.ok
    assert [s.story_key for s in report.stories] == ["a", "b"]
    assert report.payload(2) == {
        "ok": True,
        "errors": [],
        "story_count": 2,
        "response_attempt": 2,
    }


def test_a_fenced_answer_is_accepted() -> None:
    assert parse_report("```json\n" + _answer("a") + "\n```").ok


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"stories": []}', "stories"),
        ('{"stories": [{"title": "no key"}]}', "story_key"),
        ('{"stories": [{"story_key": "a", "title": "t", "extra": 1}]}', "extra"),
    ],
)
def test_invalid_answers_are_reported(content: str, error: str) -> None:
    report = parse_report(content)
    assert not report.ok
    assert error in " ".join(report.errors)


def test_duplicate_story_keys_are_refused() -> None:
    report = parse_report(_answer("a", "a"))
    assert report.errors == ("duplicate story_key: a",)


@settings(max_examples=300, deadline=None)
@given(ANSWER_CONTENT)
def test_any_answer_gets_a_storable_report_never_an_exception(content: str) -> None:
    report = parse_report(content)
    assert report.ok == bool(report.stories)
    payload = report.payload(1)
    assert is_storable(canonical_text(payload))
    for story in report.stories:  # what a valid answer would write into the document
        assert is_storable(canonical_text(story.model_dump(mode="json")))


@pytest.mark.parametrize(
    "content",
    [
        deep(200_000),
        '{"stories": ' + deep(100_000),
        deep(50_000, '{"a":', "}"),
        '{"stories": [{"story_key": "a", "title": ' + deep(5_000) + "}]}",
    ],
    ids=["array", "stories", "object", "field"],
)
def test_nesting_deeper_than_the_parser_recurses_is_an_invalid_answer(content: str) -> None:
    report = parse_report(content)
    assert not report.ok
    assert report.errors


@pytest.mark.parametrize(
    "content",
    ["```\n" + "\n" * 100_000, "```" + " " * 100_000 + "x", "```json\n" + "\t\n" * 50_000 + "`"],
    ids=["newlines", "spaces", "tabs"],
)
def test_an_answer_is_judged_in_linear_time(content: str) -> None:
    # A backtracking fence pattern took 2.4 s for 2,000 newlines and 152 s for 8,000 (cubic),
    # holding the event loop — every call and batch of the process — the whole time.
    started = time.perf_counter()
    assert not parse_report(content).ok
    assert time.perf_counter() - started < 0.5


def test_an_answer_over_the_size_limit_is_refused_unread() -> None:
    report = parse_report(" " * (MAX_ANSWER_CHARS + 1))
    assert report.errors == (
        f"the answer is {MAX_ANSWER_CHARS + 1} characters, over {MAX_ANSWER_CHARS}",
    )


@pytest.mark.parametrize("bad", [chr(0), chr(0xD800), chr(0xDFFF)], ids=["nul", "high", "low"])
def test_story_text_the_document_cannot_store_is_refused(bad: str) -> None:
    for field in ("story_key", "title", "description"):
        story = {"story_key": "k", "title": "t", field: f"a{bad}b"}
        report = parse_report(json.dumps({"stories": [story]}, ensure_ascii=bool(len(field) % 2)))
        assert not report.ok, field
        if bad == chr(0):  # (pydantic itself refuses a lone surrogate as not a string)
            assert "not storable" in " ".join(report.errors)


# -- prompts ----------------------------------------------------------------------------------


def test_the_prompt_carries_the_epic_and_the_answer_format() -> None:
    prompt, data = render_story_prompt(
        epic_id="E1", epic=Epic(title="Checkout", description="Pay"), backlog_title="Shop"
    )
    assert prompt.startswith("Generate user stories for epic E1: Checkout")
    assert '"stories"' in prompt
    assert data["epic_title"] == "Checkout"
    assert "model" not in json.dumps(data)  # no model names in business code


# -- command policy ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("latest", "force", "action"),
    [
        (None, False, Action.CREATE),
        (ThreadStatus.OPEN, True, Action.RETURN_EXISTING),
        (ThreadStatus.RUNNING, False, Action.RETURN_EXISTING),
        (ThreadStatus.COMPLETE, False, Action.NOOP),
        (ThreadStatus.COMPLETE, True, Action.CREATE),
        (ThreadStatus.FAILED, False, Action.RETRY),
        (ThreadStatus.CANCELED, True, Action.RETRY),
    ],
)
def test_command_policy(latest: ThreadStatus | None, force: bool, action: Action) -> None:
    assert decide(latest, force=force) is action


@pytest.mark.parametrize(
    ("latest", "force", "action"),
    [
        (None, False, ChildAction.CREATE),
        (ThreadStatus.RUNNING, True, ChildAction.ADOPT),
        (ThreadStatus.COMPLETE, False, ChildAction.ADOPT),
        (ThreadStatus.COMPLETE, True, ChildAction.CREATE),
        (ThreadStatus.FAILED, False, ChildAction.RETRY),
    ],
)
def test_child_policy(latest: ThreadStatus | None, force: bool, action: ChildAction) -> None:
    assert decide_child(latest, force=force) is action


# -- metrics ----------------------------------------------------------------------------------


def test_metrics_have_the_adr_0008_names_and_fixed_label_sets() -> None:
    registry = CollectorRegistry()
    metrics = ExecutorMetrics(registry)
    metrics.attempt(AttemptOutcome.SUCCESS)
    metrics.failure(FailureReason.INVALID_JSON)
    metrics.duration.observe(0.0005)
    metrics.duration.observe(70.0)
    names = {s.name: s for m in registry.collect() for s in m.samples}
    assert "synthesis_attempts_total" in names
    assert "synthesis_failures_total" in names
    attempts = [
        s for m in registry.collect() for s in m.samples if s.name == "synthesis_attempts_total"
    ]
    assert {s.labels["outcome"] for s in attempts} == {
        "success",
        "transient_failure",
        "permanent_failure",
        "skipped",
    }
    failures = [
        s for m in registry.collect() for s in m.samples if s.name == "synthesis_failures_total"
    ]
    assert len(failures) == 8
    buckets = [
        s.labels["le"]
        for m in registry.collect()
        for s in m.samples
        if s.name == "synthesis_duration_seconds_bucket"
    ]
    assert float(buckets[0]) == 0.001
    assert float(buckets[-2]) == pytest.approx(65.536)
    assert len(DURATION_BUCKETS) == 17
    depth = [s for m in registry.collect() for s in m.samples if s.name == "work_queue_depth"]
    assert {s.labels["status"] for s in depth} == {
        "queued",
        "claimed",
        "running",
        "failed",
        "parked",
    }


# -- the worker pool ----------------------------------------------------------------------------


async def test_the_pool_bounds_items_in_flight_batches_them_and_survives_a_crashing_batch() -> None:
    in_flight = 0
    peak = 0
    batches: list[list[int]] = []
    finished: list[int] = []

    async def run(jobs: Sequence[Job], done: JobDone) -> None:
        nonlocal in_flight, peak
        in_flight += len(jobs)
        peak = max(peak, in_flight)
        batches.append([item.int for item, _ in jobs])
        await asyncio.sleep(0.01)
        in_flight -= len(jobs)
        if any(item.int == 3 for item, _ in jobs):
            raise RuntimeError("boom")  # its items are given back all the same
        for job in jobs:
            finished.append(job[0].int)
            done(job)

    pool = WorkerPool(4, run, batch_size=2)
    await pool.submit([(UUID(int=n), UUID(int=0)) for n in range(10)])
    await pool.join()
    await pool.close()
    assert peak == 4  # two batches of two at a time
    assert sorted(n for batch in batches for n in batch) == list(range(10))
    assert all(1 <= len(batch) <= 2 for batch in batches)
    crashed = next(batch for batch in batches if 3 in batch)
    assert sorted(finished + crashed) == list(range(10))


async def test_the_pool_gives_an_item_back_as_soon_as_its_batch_says_it_is_done() -> None:
    started: list[int] = []
    release = asyncio.Event()

    async def run(jobs: Sequence[Job], done: JobDone) -> None:
        started.extend(item.int for item, _ in jobs)
        fast, *slow = jobs
        done(fast)  # the first item is finished at once, the others wait
        await release.wait()
        for job in slow:
            done(job)

    pool = WorkerPool(2, run)
    await pool.submit([(UUID(int=n), UUID(int=0)) for n in range(3)])
    for _ in range(20):
        await asyncio.sleep(0)
    assert started == [0, 1, 2]  # item 2 went out in the room item 0 gave back
    assert pool.free == 1  # only item 1 is still in flight
    release.set()
    await pool.join()
    await pool.close()


def test_call_failures_are_classified_by_kind_and_reason() -> None:

    assert classify_call_failure(RouteError("no route")) == (
        FailureKind.PERMANENT,
        FailureReason.ROUTER_RESOLVE,
        "no route",
    )
    assert classify_call_failure(PermanentError("refused"))[:2] == (
        FailureKind.PERMANENT,
        FailureReason.SYNTHESIZER,
    )
    assert classify_call_failure(TransientError("overloaded"))[:2] == (
        FailureKind.TRANSIENT,
        FailureReason.SYNTHESIZER,
    )
    assert classify_call_failure(KeyError("x")) == (
        FailureKind.TRANSIENT,
        FailureReason.UNKNOWN,
        "KeyError: 'x'",
    )


# -- group commit of paid answers ------------------------------------------------------------


async def test_group_commit_flushes_what_arrives_meanwhile_together_and_hands_failures_back() -> (
    None
):
    flushed: list[list[int]] = []
    gate = asyncio.Event()

    async def flush(items: list[int]) -> str:
        flushed.append(items)
        await gate.wait()
        if 13 in items:
            raise ValueError("refused")
        return "ok"

    commit: GroupCommit[int, str] = GroupCommit(flush, "test")
    first = asyncio.ensure_future(commit.submit(1))
    await asyncio.sleep(0.01)  # the first flush runs: the next ones wait for it, together
    rest = [asyncio.ensure_future(commit.submit(n)) for n in (2, 13)]
    await asyncio.sleep(0.01)
    gate.set()
    assert await first == "ok"
    results = await asyncio.gather(*rest, return_exceptions=True)
    assert flushed == [[1], [2, 13]]
    assert all(isinstance(r, ValueError) for r in results)  # one flush, one outcome for all


async def test_closing_a_group_commit_leaves_nobody_waiting() -> None:
    async def never(items: list[int]) -> None:
        await asyncio.Event().wait()

    commit: GroupCommit[int, None] = GroupCommit(never, "test")
    waiting = [asyncio.ensure_future(commit.submit(n)) for n in range(3)]
    await asyncio.sleep(0.01)
    await commit.aclose()
    done, pending = await asyncio.wait(waiting, timeout=1)
    assert not pending
    assert all(task.cancelled() for task in done)
