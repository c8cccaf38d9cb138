"""Any header content is survivable: the dead-letter wire form, the redrive headers, the views
of `spectral dlq list/show` and the database store read every header without raising, and
what they write back is bounded (a record failing again and again cannot grow its dead letter,
a non-ASCII history is not re-escaped into three times its size)."""

from __future__ import annotations

import json

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spectral.dlq.records import DeadLetterRecord
from spectral.dlq.store import _headers_json, _history_json, storable
from spectral.kafka.dlq import (
    DETAIL_LIMIT,
    FIELD_LIMIT,
    HISTORY,
    HISTORY_ITEMS,
    DeadLetter,
    carried_history,
    history_of,
    parse_headers,
    redrive_headers,
)
from tests.unit.dlq.strategies import headers, keys, timestamps, values

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

REFERENCE_BYTES = 4096
"""A reference dead letter's key, value and headers stay under this, whatever the record."""


def _letter(hs: list[tuple[str, bytes | None]], key: bytes | None, value: bytes) -> DeadLetter:
    return DeadLetter(
        reason="not_json",
        detail="x" * 5000,
        source_topic="t",
        source_partition=0,
        source_offset=7,
        consumer="c",
        key=key,
        value=value,
        original_headers=tuple(hs),
    )


def _bounded(items: tuple[dict[str, str], ...] | list[dict[str, str]]) -> None:
    assert len(items) <= HISTORY_ITEMS
    for item in items:
        for name, field in item.items():
            assert isinstance(field, str)
            assert len(field) <= (DETAIL_LIMIT if name == "detail" else FIELD_LIMIT)


@FAST
@given(hs=headers, key=keys, value=values)
def test_a_dead_letter_of_any_record_is_built_bounded_and_serialisable(
    hs: list[tuple[str, bytes | None]], key: bytes | None, value: bytes
) -> None:
    letter = _letter(hs, key, value)
    _bounded(letter.history)
    out = letter.headers()
    history = dict(out)[HISTORY]
    assert history is not None
    assert isinstance(orjson.loads(history), list)
    own = [v or b"" for k, v in out if k.startswith("dlq.") and k != HISTORY]
    assert sum(map(len, own)) < 4 * DETAIL_LIMIT
    assert letter.size() >= len(value)
    reference = letter.as_reference("MessageSizeTooLargeError: too large")
    assert reference.value == b""
    assert reference.original_headers == ()
    assert reference.size() < REFERENCE_BYTES
    assert "left at its source offset" in reference.detail


@FAST
@given(hs=headers)
def test_reading_and_redriving_any_headers_never_raises_and_stays_bounded(
    hs: list[tuple[str, bytes | None]],
) -> None:
    parse_headers(hs)
    _bounded(carried_history(hs))
    full = history_of(hs)
    assert all(isinstance(item, dict) for item in full)
    again = redrive_headers(hs, "t.dlq", 0, 1)
    carried = dict(again)[HISTORY]
    assert carried is not None
    _bounded(orjson.loads(carried))
    # The redriven record fails again: its dead letter's history stays bounded too.
    _bounded(_letter(list(again), b"k", b"v").history)


@FAST
@given(hs=headers, key=keys, value=values, ts=timestamps)
def test_dlq_views_show_any_dead_letter(
    hs: list[tuple[str, bytes | None]], key: bytes | None, value: bytes, ts: int
) -> None:
    record = DeadLetterRecord("t.dlq", 0, 3, ts, key, value, tuple(hs))
    summary = record.summary_json(redriven=False)
    full = record.full_json(redriven=True)
    json.dumps(summary, ensure_ascii=False).encode()
    json.dumps(full, ensure_ascii=False).encode()
    record.is_reference  # noqa: B018 - must not raise


@FAST
@given(hs=headers, text=st.text())
def test_the_store_keeps_any_header_and_text_in_a_form_postgresql_accepts(
    hs: list[tuple[str, bytes | None]], text: str
) -> None:
    stored = storable(text)
    assert "\x00" not in stored
    stored.encode("utf-8")  # no lone surrogates
    assert "\\u0000" not in _headers_json(hs)
    history = _letter(hs, None, b"").history
    assert "\\u0000" not in _history_json(history)


def test_the_cases_that_crashed_the_consumer_are_read_as_no_history() -> None:
    for value in (None, b"null", b"[" * 50_000 + b"]" * 50_000, b"\xff\xfe[", b"7", b"{}"):
        assert carried_history([(HISTORY, value)]) == ()
        _letter([(HISTORY, value)], b"k", b"v").headers()


def test_a_non_ascii_history_is_written_back_as_utf8_not_escaped() -> None:
    items = [{"reason": "handler_error", "detail": "é" * 900, "source": f"t:0:{n}"} for n in (1, 2)]
    raw = json.dumps(items, ensure_ascii=False).encode()
    letter = _letter([(HISTORY, raw)], b"k", b"v")
    written = dict(letter.headers())[HISTORY]
    assert written is not None
    assert len(written) <= len(raw) + 100  # \u00e9 escapes would make it ~3x


def test_a_history_of_many_failures_keeps_the_first_and_the_latest() -> None:
    items = [{"reason": f"r{n}", "source": f"t:0:{n}"} for n in range(100)]
    carried = carried_history([(HISTORY, json.dumps(items).encode())])
    assert len(carried) == HISTORY_ITEMS
    assert carried[0]["reason"] == "r0"
    assert carried[1]["reason"] == "history_cut"
    assert carried[-1]["reason"] == "r99"
