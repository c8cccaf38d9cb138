"""Unknown outcomes, pure: a call whose worker died mid-call is re-issued under its idempotency
key — the attempt goes on, its recorded prompt is the request — a bounded number of times, and
only while the policy says so; a concluding error or an answer ends the attempt as before."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from uuid import UUID

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consumers.work_executor.outcomes import (
    MAX_REISSUES,
    REISSUE_LEASE_MARGIN_SECONDS,
    UnknownOutcomePolicy,
)
from consumers.work_executor.plan import REISSUE, Reuse, Start, Unknown, next_step
from consumers.work_executor.retry import RetryStrategy
from producers.work.domain.hashing import content_hash
from producers.work.domain.history import ItemOutcome, reconstruct
from producers.work.domain.model import EntryType, LedgerEntry

ITEM = UUID(int=9)
POLICY = RetryStrategy(max_attempts=3)
PROMPT = {"function_key": "story_generate", "prompt": "p", "idempotency_key": f"{ITEM}:1"}


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
        created_at=datetime(2026, 12, 1, tzinfo=UTC),
    )


def _reissued(times: int, attempt: int = 1) -> list[LedgerEntry]:
    return [
        _e(1, attempt, EntryType.PROMPT, **PROMPT),
        *(
            _e(2 + n, attempt, EntryType.ERROR, kind="outcome_unknown", disposition=REISSUE)
            for n in range(times)
        ),
    ]


@given(st.integers(0, 6))
def test_a_reissued_call_stays_unknown_with_its_recorded_prompt_until_an_answer_or_an_end(
    times: int,
) -> None:
    entries = _reissued(times)
    step = next_step(1, entries, POLICY)
    assert step == Unknown(1, times, PROMPT)
    assert UnknownOutcomePolicy().reissues(step) == (times < MAX_REISSUES)
    assert not UnknownOutcomePolicy(reissue=False).reissues(step)
    # The re-issued call's answer is the attempt's: reused, never paid again.
    answered = [*entries, _e(99, 1, EntryType.RESPONSE, content="{}")]
    assert next_step(1, answered, POLICY) == Reuse(1, "{}")
    # An error that concludes the attempt (the policy gave up on re-issuing) moves on.
    ended = [*entries, _e(99, 1, EntryType.ERROR, kind="outcome_unknown", disposition="retry")]
    assert next_step(1, ended, POLICY) == Start(2)


def test_the_history_of_a_reissued_call_is_in_flight_then_one_paid_call() -> None:
    entries = _reissued(1)
    assert reconstruct(entries).items[ITEM].outcome is ItemOutcome.IN_FLIGHT
    answered = reconstruct([*entries, _e(9, 1, EntryType.RESPONSE, content="{}")])
    assert answered.consistent, answered.problems
    assert answered.items[ITEM].paid_calls == 1


def test_the_policy_refuses_a_horizon_that_is_not_positive() -> None:
    with pytest.raises(ValueError, match="horizon"):
        UnknownOutcomePolicy(horizon_seconds=0)


@given(
    reissues=st.integers(0, 6),
    call=st.floats(0.0, 120.0),
    lease=st.floats(1.0, 600.0),
)
def test_a_timed_out_call_is_reissued_only_while_allowed_and_only_if_it_fits_the_lease(
    reissues: int, call: float, lease: float
) -> None:
    """A call that timed out after ``call`` seconds goes out again under its key within the
    lease only under ``reissue``, within the re-issue limit, and if a call as long (the same
    timeout bounds it) plus the margin fits in the lease its record renews."""
    fits = call + REISSUE_LEASE_MARGIN_SECONDS <= lease
    assert UnknownOutcomePolicy().reissues_timed_out(reissues, call, lease) == (
        fits and reissues < MAX_REISSUES
    )
    assert not UnknownOutcomePolicy(reissue=False).reissues_timed_out(reissues, call, lease)
