"""What PostgreSQL can store (spectral.db.storable) and the ledger payloads built from any text
(producers.work.domain.payloads): paid answers round-trip exactly, diagnostics are escaped,
nothing a payload holds can make its statement fail. The database's side of it is proved in
tests/integration/work_executor/test_hostile_answers.py."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from producers.work.domain.hashing import canonical_text, text_hash
from producers.work.domain.payloads import (
    error_payload,
    parse_report_payload,
    response_content,
    response_model,
    response_payload,
    unreadable_response_payload,
    usage_counts,
)
from spectral.db.storable import (
    decode_text,
    encode_bytes,
    encode_text,
    escape_text,
    is_storable,
    storable_json,
)
from tests.hostile_answers import ANY_TEXT, USAGE, hostile_text

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | ANY_TEXT,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(ANY_TEXT, children, max_size=3)
    ),
    max_leaves=12,
)


def _all_strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *_all_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _all_strings(v)]
    return []


def _postgres_would_take(value: object) -> None:
    """What the repository sends: canonical text, hashed as UTF-8 — and no NUL in it."""
    text = canonical_text(value)
    text_hash(text)  # raises on a lone surrogate
    assert "\x00" not in text  # nor, so, a \u0000 escape once PostgreSQL parses it


@given(ANY_TEXT | hostile_text())
def test_a_paid_text_round_trips_exactly_and_is_storable(text: str) -> None:
    fields = encode_text("content", text)
    assert decode_text(fields, "content") == text
    assert all(is_storable(v) for v in fields.values())
    _postgres_would_take(fields)
    assert (len(fields) == 1) == is_storable(text)  # the plain form whenever it is enough


@given(hostile_text())
def test_escaping_shows_what_could_not_be_stored(text: str) -> None:
    escaped = escape_text(text)
    assert is_storable(escaped)
    assert escape_text(escaped) == escaped
    assert "\\u" in escaped


@given(JSON_VALUES)
def test_any_json_value_is_made_storable(value: object) -> None:
    stored = storable_json(value)
    assert all(is_storable(s) for s in _all_strings(stored))
    _postgres_would_take(stored)
    if all(is_storable(s) for s in _all_strings(value)):
        assert stored is value  # nothing copied when nothing needs escaping


@given(ANY_TEXT | hostile_text(), ANY_TEXT | hostile_text(), USAGE)
def test_a_response_payload_keeps_the_answer_and_the_model_exactly(
    content: str, model: str, usage: dict[str, object]
) -> None:
    payload = response_payload(content=content, model=model, usage=usage, duration_ms=3)
    _postgres_would_take(payload)
    assert response_content(payload) == content
    assert response_model(payload) == model
    assert set(payload["usage"]) <= set(usage)
    assert all(type(v) is int for v in payload["usage"].values())


@given(st.binary(max_size=300), ANY_TEXT | hostile_text())
def test_an_unreadable_answer_keeps_its_bytes(body: bytes, model: str) -> None:
    payload = unreadable_response_payload(body=body, model=model, usage=None, duration_ms=1)
    _postgres_would_take(payload)
    assert response_content(payload) is None
    assert encode_bytes("body", body)["body_base64"] == payload["body_base64"]


@given(hostile_text())
def test_diagnostics_are_storable(message: str) -> None:
    _postgres_would_take(
        error_payload(kind="permanent", reason="x", message=message, disposition="retry")
    )
    _postgres_would_take(
        parse_report_payload(ok=False, errors=[message], story_count=0, response_attempt=1)
    )


def test_usage_keeps_plain_integer_counts_only() -> None:
    assert usage_counts(
        {"total_tokens": 3, "x\x00": 1, "ok": True, "n": None, "big": 2**60, "d": {"a": 1}}
    ) == {"total_tokens": 3}
    assert usage_counts(["not", "a", "mapping"]) == {}
