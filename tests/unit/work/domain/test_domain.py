"""Pure parts of the work domain: identities, the lock-order rule, documents and mutations,
retry policy, history reconstruction."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from consumers.work_executor.retry import (
    DeadLetterReason,
    FailureKind,
    GiveUp,
    RetryDecision,
    RetryStrategy,
)
from producers.work.domain.documents import (
    InvalidDocumentError,
    ReplaceEpicStories,
    Story,
    apply_in_turn,
    apply_mutation,
    validate_backlog,
)
from producers.work.domain.hashing import content_hash
from producers.work.domain.history import ItemOutcome, describe, reconstruct
from producers.work.domain.identity import (
    check_identifier,
    epic_lock_scope,
    project_lock_scope,
    thread_identity,
)
from producers.work.domain.locks import LockKey, LockKind, LockOrderError, check_order
from producers.work.domain.model import EntryType, LedgerEntry, ThreadKind

T0 = datetime(2026, 1, 9, 12, 0, tzinfo=UTC)


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


# -- identity ------------------------------------------------------------------------------


def test_identity_is_semantic_and_children_share_the_single_epic_identity() -> None:
    one = thread_identity(ThreadKind.STORY_GENERATE_EPIC, "p1", "doc", "E1")
    assert one == thread_identity(ThreadKind.STORY_GENERATE_EPIC, "p1", "doc", "E1")
    assert one != thread_identity(ThreadKind.STORY_GENERATE_EPIC, "p1", "doc", "E2")
    assert thread_identity(ThreadKind.STORY_GENERATE_ALL, "p1", "doc") != one
    with pytest.raises(ValueError, match="epic"):
        thread_identity(ThreadKind.STORY_GENERATE_EPIC, "p1", "doc")
    assert epic_lock_scope("doc", "E1") == "epic:doc/E1"
    assert project_lock_scope("p1") == "project:p1"


@pytest.mark.parametrize("bad", ["", "a/b", "a b", "-x", "x" * 129])
def test_identifiers_are_checked(bad: str) -> None:
    with pytest.raises(ValueError, match="must match"):
        check_identifier(bad, "epic id")


# -- locks ----------------------------------------------------------------------------------

PROJECT = LockKey(LockKind.PROJECT, "project:p1")
EPIC_A = LockKey(LockKind.TARGET, "epic:d/A")
EPIC_B = LockKey(LockKind.TARGET, "epic:d/B")


def test_project_then_targets_in_order_is_allowed() -> None:
    check_order([], PROJECT)
    check_order([PROJECT], EPIC_A)
    check_order([PROJECT, EPIC_A], EPIC_B)


def test_project_lock_after_an_epic_lock_is_refused() -> None:
    with pytest.raises(LockOrderError, match="ADR-035"):
        check_order([EPIC_A], PROJECT)


def test_targets_out_of_order_and_two_projects_are_refused() -> None:
    with pytest.raises(LockOrderError, match="ascending"):
        check_order([EPIC_B], EPIC_A)
    with pytest.raises(LockOrderError, match="one project"):
        check_order([PROJECT], LockKey(LockKind.PROJECT, "project:p2"))


def test_lock_keys_are_stable_signed_32_bit() -> None:
    assert LockKey(LockKind.TARGET, "epic:d/A").objid == EPIC_A.objid
    assert -(2**31) <= EPIC_A.objid < 2**31
    assert EPIC_A.objid != EPIC_B.objid


# -- documents ------------------------------------------------------------------------------

BACKLOG = {
    "title": "Shop",
    "epics": {"E1": {"title": "Checkout"}, "E2": {"title": "Search", "description": "find"}},
}
STORY = Story(story_key="E1-1", title="Pay", description="", acceptance_criteria=("ok",))


def test_a_mutation_replaces_one_epic_and_is_idempotent() -> None:
    item = uuid.uuid4()
    mutation = ReplaceEpicStories.for_item(item, "doc", "E1", (STORY,))
    assert mutation.mutation_id == ReplaceEpicStories.for_item(item, "doc", "E1", ()).mutation_id
    once = apply_mutation(BACKLOG, mutation)
    twice = apply_mutation(once, mutation)
    assert once == twice
    assert once["epics"]["E1"]["stories"][0]["title"] == "Pay"
    assert once["epics"]["E2"] == {"title": "Search", "description": "find", "stories": []}


def test_a_mutation_of_a_missing_epic_or_an_invalid_document_is_refused() -> None:
    with pytest.raises(InvalidDocumentError, match="no epic"):
        apply_mutation(BACKLOG, ReplaceEpicStories.for_item(uuid.uuid4(), "doc", "E9", ()))
    with pytest.raises(InvalidDocumentError, match="epics"):
        validate_backlog({"epics": {"E1": {"title": ""}}})
    with pytest.raises(InvalidDocumentError):
        validate_backlog({"epics": {}, "extra": 1})


def test_mutations_applied_in_turn_give_the_contents_of_applying_them_one_by_one() -> None:
    too_many = tuple(Story(story_key=f"E2-{n}", title=f"Story {n}") for n in range(51))
    first = ReplaceEpicStories.for_item(uuid.uuid4(), "doc", "E1", (STORY,))
    refused = ReplaceEpicStories.for_item(uuid.uuid4(), "doc", "E2", too_many)
    missing = ReplaceEpicStories.for_item(uuid.uuid4(), "doc", "E9", (STORY,))
    last = ReplaceEpicStories.for_item(
        uuid.uuid4(), "doc", "E2", (Story(story_key="E2-1", title="  Find  "),)
    )
    results = apply_in_turn(BACKLOG, [first, refused, missing, last])
    one = apply_mutation(BACKLOG, first)
    assert results[0] == one
    assert isinstance(results[1], InvalidDocumentError)
    assert "epics.E2.stories" in str(results[1])
    assert isinstance(results[2], InvalidDocumentError)
    assert "no epic" in str(results[2])
    assert results[3] == apply_mutation(one, last)
    assert results[3]["epics"]["E2"]["stories"][0]["title"] == "Find"
    with pytest.raises(InvalidDocumentError):
        apply_mutation(BACKLOG, refused)


# -- retry policy (fake clock) ---------------------------------------------------------------


def test_backoff_schedule_is_min_base_2_pow_n_minus_1_and_10_base() -> None:
    policy = RetryStrategy(max_attempts=10, base_seconds=1.0)
    assert [policy.backoff(n).total_seconds() for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]
    half = RetryStrategy(max_attempts=3, base_seconds=0.5)
    assert [half.backoff(n).total_seconds() for n in (1, 2, 3, 4, 5)] == [0.5, 1, 2, 4, 5]


def test_default_policy_retries_at_1s_then_2s_then_gives_up() -> None:
    clock = FakeClock()
    policy = RetryStrategy()
    first = policy.get_retry_decision(1, FailureKind.TRANSIENT, clock())
    assert first == RetryDecision(not_before=T0 + timedelta(seconds=1), next_attempt=2)
    clock.advance(1)
    second = policy.get_retry_decision(2, FailureKind.TRANSIENT, clock())
    assert second == RetryDecision(not_before=T0 + timedelta(seconds=3), next_attempt=3)
    clock.advance(2)
    assert policy.get_retry_decision(3, FailureKind.TRANSIENT, clock()) == GiveUp(
        DeadLetterReason.MAX_ATTEMPTS_EXCEEDED
    )
    assert not policy.may_start_attempt(3)
    assert policy.may_start_attempt(2)


def test_unknown_outcomes_use_their_attempt_and_permanent_failures_stop_at_once() -> None:
    policy = RetryStrategy()
    assert isinstance(policy.get_retry_decision(1, FailureKind.OUTCOME_UNKNOWN, T0), RetryDecision)
    assert policy.get_retry_decision(3, FailureKind.OUTCOME_UNKNOWN, T0) == GiveUp(
        DeadLetterReason.MAX_ATTEMPTS_EXCEEDED
    )
    assert policy.get_retry_decision(1, FailureKind.PERMANENT, T0) == GiveUp(
        DeadLetterReason.PERMANENT_FAILURE
    )
    with pytest.raises(ValueError, match="start at 1"):
        policy.get_retry_decision(0, FailureKind.TRANSIENT, T0)


# -- history ----------------------------------------------------------------------------------


def _entry(
    seq: int, item: uuid.UUID, attempt: int, entry_type: EntryType, **payload: object
) -> LedgerEntry:
    return LedgerEntry(
        entry_id=uuid.uuid4(),
        seq=seq,
        thread_id=uuid.UUID(int=1),
        work_item_id=item,
        attempt=attempt,
        entry_type=entry_type,
        payload=payload,
        hash=content_hash(payload),
        created_at=T0 + timedelta(seconds=seq),
    )


def test_history_lines_count_stories_in_words() -> None:
    item = uuid.uuid4()
    one = _entry(1, item, 1, EntryType.PARSE_REPORT, ok=True, story_count=1)
    three = _entry(2, item, 1, EntryType.PARSE_REPORT, ok=True, story_count=3)
    assert describe(one) == "valid, 1 story"
    assert describe(three) == "valid, 3 stories"


def test_history_reconstructs_attempts_and_outcome_from_the_ledger_alone() -> None:
    item = uuid.uuid4()
    entries = [
        _entry(1, item, 1, EntryType.PROMPT, prompt="p"),
        _entry(2, item, 1, EntryType.ERROR, kind="transient", disposition="retry"),
        _entry(3, item, 2, EntryType.PROMPT, prompt="p"),
        _entry(4, item, 2, EntryType.RESPONSE, model="m", content="{}"),
        _entry(5, item, 2, EntryType.PARSE_REPORT, ok=True),
        _entry(6, item, 2, EntryType.MUTATION_REPORT, result_version=2),
    ]
    history = reconstruct(reversed(entries))
    assert history.consistent
    (only,) = history.items.values()
    assert only.outcome is ItemOutcome.APPLIED
    assert only.paid_calls == 2
    assert only.responses == 1


def test_history_reports_tampering_and_orphans() -> None:
    item = uuid.uuid4()
    good = _entry(1, item, 1, EntryType.PROMPT, prompt="p")
    tampered = LedgerEntry(**{**good.__dict__, "payload": {"prompt": "q"}})
    orphan = _entry(2, item, 3, EntryType.RESPONSE, model="m")
    history = reconstruct([tampered, orphan])
    assert not history.consistent
    assert any("hash" in p for p in history.problems)
    assert any("no prompt" in p for p in history.problems)
    in_flight = reconstruct([_entry(1, item, 1, EntryType.PROMPT, prompt="p")])
    assert in_flight.items[item].outcome is ItemOutcome.IN_FLIGHT
