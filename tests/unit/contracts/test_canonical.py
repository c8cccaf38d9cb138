"""RFC 8785 canonical JSON: our bytes equal the independent ``rfc8785`` oracle's."""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from contracts import CanonicalizationError, canonical_json, snapshot_hash
from contracts.canonical import check_json_values

SAFE = 2**53 - 1
CHUNK = 4096


def _chunks() -> list[str]:
    scalars = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    return ["".join(map(chr, scalars[i : i + CHUNK])) for i in range(0, len(scalars), CHUNK)]


def test_string_escaping_equals_rfc8785_for_every_code_point() -> None:
    # escaping is per character, so comparing long runs of consecutive code points covers all
    for text in _chunks():
        assert canonical_json(text) == rfc8785.dumps(text)
        assert canonical_json({text: 0}) == rfc8785.dumps({text: 0})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('"', b'"\\""'),
        ("\\", b'"\\\\"'),
        ("\b\t\n\f\r", b'"\\b\\t\\n\\f\\r"'),
        ("\x00\x01\x1f", b'"\\u0000\\u0001\\u001f"'),
        ("\x0b", b'"\\u000b"'),
        ("\x7f", b'"\x7f"'),
        ("\u2028\u2029", '"\u2028\u2029"'.encode()),
        ("/", b'"/"'),
        ("é😀", '"é😀"'.encode()),
    ],
)
def test_escapes_are_only_those_json_requires(text: str, expected: bytes) -> None:
    assert canonical_json(text) == expected == rfc8785.dumps(text)


@pytest.mark.parametrize("text", ["\ud800", "a\udfffb", "\udc00\ud800"])
def test_lone_surrogates_are_refused_in_values_and_keys(text: str) -> None:
    with pytest.raises(CanonicalizationError, match="surrogate"):
        canonical_json({"v": text})
    with pytest.raises(CanonicalizationError, match="surrogate"):
        canonical_json({text: 1})


@pytest.mark.parametrize(
    "value",
    [1.0, 0.5, math.nan, math.inf, -math.inf, {"a": {"b": [1, 2.5]}}, [1, [2, [3.0]]]],
)
def test_floats_are_refused_anywhere(value: object) -> None:
    with pytest.raises(CanonicalizationError, match="integers"):
        canonical_json(value)


def test_the_error_names_the_path_of_the_offending_value() -> None:
    with pytest.raises(CanonicalizationError, match=r"\$\.a\.b\[1\]"):
        canonical_json({"a": {"b": [1, 2.5]}, "c": 1})


@pytest.mark.parametrize("value", [SAFE + 1, -(SAFE + 1), 2**64, {"n": 2**70}])
def test_integers_beyond_the_i_json_range_are_refused(value: object) -> None:
    with pytest.raises(CanonicalizationError, match="integers must lie within"):
        canonical_json(value)


def test_the_integer_range_edges_are_accepted() -> None:
    assert canonical_json([SAFE, -SAFE, 0]) == b"[9007199254740991,-9007199254740991,0]"


@pytest.mark.parametrize(
    "value", [{1: "a"}, {"a": b"bytes"}, {"a": {1, 2}}, Decimal(1), {"a": Decimal("1.5")}, object()]
)
def test_non_json_values_are_refused(value: object) -> None:
    with pytest.raises(CanonicalizationError):
        canonical_json(value)


def test_tuples_are_arrays_and_literals_are_lowercase() -> None:
    assert canonical_json({"t": (1, "x"), "b": [True, False, None]}) == (
        b'{"b":[true,false,null],"t":[1,"x"]}'
    )


def test_keys_sort_by_utf16_code_units_not_code_points() -> None:
    value = {"\ue000": 1, "\U0001f600": 2, "\uffff": 3, "\U00010000": 4, "a": 5}
    out = canonical_json(value)
    assert out == rfc8785.dumps(value)
    assert list(json.loads(out)) == ["a", "\U00010000", "\U0001f600", "\ue000", "\uffff"]


def test_utf16_order_applies_to_nested_objects_too() -> None:
    value: Any = {"x": [{"\ue001": 1, "\U0001f680": {"\uf000": 1, "\U00020000": 2}}]}
    assert canonical_json(value) == rfc8785.dumps(value)


def test_snapshot_hash_ignores_identity_and_hash_fields_only() -> None:
    base = {"cluster_id": "a", "snapshot_hash": "b", "severity": "low"}
    assert snapshot_hash(base) == snapshot_hash({"severity": "low"})
    assert snapshot_hash(base) != snapshot_hash({**base, "severity": "high"})
    assert len(snapshot_hash(base)) == 32
    assert snapshot_hash(base) == snapshot_hash(base).lower()


def test_check_json_values_accepts_json_and_reports_paths() -> None:
    check_json_values({"a": [1, "x", None, True, {"b": []}]})
    with pytest.raises(CanonicalizationError, match=r"payload\.extra\[0\]"):
        check_json_values({"extra": [0.1]}, "payload")


# ---- property: our canonical bytes equal the oracle's for arbitrary JSON values -------------

json_keys = st.text(
    st.characters(codec="utf-8") | st.sampled_from('\ue000\uffff\U0001f600\x00"\\'),
    max_size=6,
)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-SAFE, max_value=SAFE)
    | st.text(st.characters(codec="utf-8"), max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(json_keys, inner, max_size=5),
    max_leaves=30,
)


@given(json_values)
def test_canonical_json_equals_the_rfc8785_oracle(value: Any) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


@given(st.dictionaries(json_keys, json_values, max_size=8))
def test_canonical_json_parses_back_to_the_same_value(value: dict[str, Any]) -> None:
    assert json.loads(canonical_json(value)) == value
