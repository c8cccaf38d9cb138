from __future__ import annotations

import pytest

from consumers.rule_candidates.transitions import (
    ALLOWED,
    SETTLED,
    Status,
    TransitionError,
    allowed_from,
    check,
    is_allowed,
    parse_status,
)
from spectral.errors import PermanentError

P, R, D, S = Status.PENDING, Status.IN_REVIEW, Status.DISMISSED, Status.RESOLVED

EXPECTED = {
    (P, R), (P, D), (P, S),
    (R, P), (R, D), (R, S),
    (D, P), (D, R),
    (S, P), (S, R),
}  # fmt: skip


@pytest.mark.parametrize("current", list(Status))
@pytest.mark.parametrize("target", list(Status))
def test_the_policy_table(current: Status, target: Status) -> None:
    if current == target:
        assert is_allowed(current, target)
        assert check(current, target) is False  # a no-op, allowed
    elif (current, target) in EXPECTED:
        assert is_allowed(current, target)
        assert check(current, target) is True
    else:
        assert not is_allowed(current, target)
        with pytest.raises(TransitionError):
            check(current, target)


def test_a_settled_verdict_is_never_swapped_directly() -> None:
    assert {D, S} == SETTLED
    assert S not in ALLOWED[D]
    assert D not in ALLOWED[S]


def test_every_status_can_be_reopened_or_left() -> None:
    for status in Status:
        assert allowed_from(status), status
    for settled in SETTLED:
        assert P in ALLOWED[settled]


def test_the_error_names_the_allowed_targets() -> None:
    with pytest.raises(TransitionError) as caught:
        check(D, S)
    message = str(caught.value)
    assert "from dismissed to resolved" in message
    assert "allowed from dismissed: pending, in_review" in message
    assert caught.value.allowed == (P, R)
    assert isinstance(caught.value, PermanentError)


def test_parse_status() -> None:
    assert parse_status("in_review") is R
    with pytest.raises(
        ValueError, match="expected one of: pending, in_review, dismissed, resolved"
    ):
        parse_status("closed")
