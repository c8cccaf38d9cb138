from __future__ import annotations

import json

from consumers.rule_candidates.validation import INT4_MAX, Problem, check_snapshot


def raw(summary: str) -> bytes:
    return json.dumps({"payload": {"evidence_bundle": [{"summary": summary}]}}).encode()


def test_a_clean_snapshot_passes() -> None:
    assert check_snapshot(INT4_MAX, raw("ok")) is None


def test_a_count_beyond_the_int_column_is_refused() -> None:
    problem = check_snapshot(INT4_MAX + 1, raw("ok"))
    assert problem is not None
    assert problem[0] is Problem.FAILURE_COUNT_RANGE


def test_a_nul_character_is_refused() -> None:
    problem = check_snapshot(1, raw("bad\x00byte"))
    assert problem is not None
    assert problem[0] is Problem.NUL_CHARACTER


def test_an_escaped_backslash_before_u0000_is_not_a_nul() -> None:
    text = raw("a literal \\u0000 in text")
    assert b"\\\\u0000" in text
    assert check_snapshot(1, text) is None


def test_a_nul_in_a_key_is_refused() -> None:
    text = json.dumps({"payload": {"extra\x00": 1}}).encode()
    assert check_snapshot(1, text) is not None
