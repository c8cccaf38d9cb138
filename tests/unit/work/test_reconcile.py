"""Reading a provider's billing export: CSV and JSON lines, and hostile files — bad encodings,
huge lines, missing columns, wrong types — each bad row reported by its line, never guessed at,
and never stopping the rest; a file that is not an export at all refused whole."""

from __future__ import annotations

import io
import json
from decimal import Decimal
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from producers.work.reconcile import (
    MAX_LINE_BYTES,
    ExportError,
    ExportFormat,
    parse_key,
    read_export,
)

KEY = "6b0f661d-93c6-456d-9e89-54ab7c463d6f:2"


def _read(data: bytes, fmt: ExportFormat) -> object:
    return read_export(io.BytesIO(data), fmt)


def test_a_csv_export_with_extra_columns_and_a_call_id_alias() -> None:
    export = read_export(
        io.BytesIO(
            b"date,call_id,model,tokens,cost\r\n"
            b"2026-12-01,k1,m,550,0.0011\r\n"
            b"\r\n"
            b'2026-12-01,"k,2",m,7,\r\n'
        ),
        ExportFormat.CSV,
    )
    assert [(r.key, r.line, r.tokens, r.cost) for r in export.rows] == [
        ("k1", 2, 550, Decimal("0.0011")),
        ("k,2", 4, 7, None),
    ]
    assert export.invalid == []


def test_json_lines_with_bad_rows_reported_by_line() -> None:
    lines = [
        json.dumps({"idempotency_key": KEY, "tokens": 10, "cost": "0.5"}).encode(),
        b"not json",
        b"[1, 2]",
        json.dumps({"idempotency_key": KEY, "tokens": -3}).encode(),
        json.dumps({"idempotency_key": KEY, "tokens": True}).encode(),
        json.dumps({"idempotency_key": KEY, "tokens": 1, "cost": "NaN"}).encode(),
        json.dumps({"tokens": 1}).encode(),
        b"\xff\xfe{}",
        b'{"idempotency_key": "a\\u0000", "tokens": 1}',
        b"[" * 100_000,
        json.dumps({"call_id": "x", "tokens": "12"}).encode(),
    ]
    export = read_export(io.BytesIO(b"\n".join(lines)), ExportFormat.JSONL)
    assert [(r.key, r.line, r.tokens) for r in export.rows] == [
        (KEY, 1, 10),
        ("a\x00", 9, 1),
        ("x", 11, 12),
    ]
    assert [line for line, _ in export.invalid] == [2, 3, 4, 5, 6, 7, 8, 10]
    assert "not UTF-8" in dict(export.invalid)[8]


def test_a_huge_line_is_skipped_without_holding_it_and_the_next_is_read() -> None:
    huge = b'{"idempotency_key": "' + b"k" * (3 * MAX_LINE_BYTES) + b'", "tokens": 1}'
    export = read_export(
        io.BytesIO(huge + b"\n" + b'{"idempotency_key": "k", "tokens": 2}\n'), ExportFormat.JSONL
    )
    assert export.invalid == [(1, f"longer than {MAX_LINE_BYTES:,} bytes")]
    assert [(r.key, r.line) for r in export.rows] == [("k", 2)]


def test_a_csv_without_its_required_columns_or_header_is_refused_whole() -> None:
    with pytest.raises(ExportError, match="needs an idempotency_key"):
        _read(b"key,amount\nk,1\n", ExportFormat.CSV)
    with pytest.raises(ExportError, match="empty"):
        _read(b"", ExportFormat.CSV)
    with pytest.raises(ExportError, match="header"):
        _read(b"\xff\xfeidempotency_key,tokens\n", ExportFormat.CSV)


def test_csv_rows_with_the_wrong_shape_are_invalid_rows() -> None:
    export = read_export(
        io.BytesIO(
            b"idempotency_key,tokens,cost\n"
            b"k1,1\n"  # a cell short
            b"k2,lots,1\n"
            b"k3,4,1e400\n"
            b'"k4,5,1\n'  # an unterminated quote on its line
            b"k5,6,0.25\n"
        ),
        ExportFormat.CSV,
    )
    assert [(r.key, r.tokens) for r in export.rows] == [("k5", 6)]
    assert [line for line, _ in export.invalid] == [2, 3, 4, 5]


def test_the_format_follows_the_extension() -> None:
    from pathlib import Path  # noqa: PLC0415 - only here

    assert ExportFormat.of(Path("usage.CSV")) is ExportFormat.CSV
    assert ExportFormat.of(Path("usage.jsonl")) is ExportFormat.JSONL
    assert ExportFormat.of(Path("usage.ndjson")) is ExportFormat.JSONL


def test_keys_are_the_idempotency_keys_spectral_sends() -> None:
    assert parse_key(KEY) == (UUID(KEY[:-2]), 2)
    for other in ("", "x:1", f"{KEY[:-2]}:", f"{KEY[:-2]}:-1", f"{KEY[:-2]}:1e3", "req_abc"):
        assert parse_key(other) is None


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=4096), fmt=st.sampled_from(list(ExportFormat)))
def test_no_bytes_make_the_reader_raise_anything_but_a_refusal(
    data: bytes, fmt: ExportFormat
) -> None:
    try:
        export = read_export(io.BytesIO(data), fmt)
    except ExportError:
        return
    for row in export.rows:
        assert 0 <= row.tokens < 2**62
        assert row.cost is None or (row.cost.is_finite() and row.cost >= 0)
