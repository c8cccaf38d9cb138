"""The checked-in cross-language vectors: oracle-built, and our implementation agrees."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contracts import DecodeError, canonical_json, snapshot_hash, snapshot_hash_of_json
from tests.unit.contracts import vectors

VALID: list[dict[str, Any]] = json.loads(vectors.VALID_FILE.read_text("utf-8"))
INVALID: list[dict[str, str]] = json.loads(vectors.INVALID_FILE.read_text("utf-8"))


def test_checked_in_vectors_are_the_oracles_output() -> None:
    assert vectors.VALID_FILE.read_text("utf-8") == vectors.render(vectors.build_vectors())
    assert vectors.INVALID_FILE.read_text("utf-8") == vectors.render(
        vectors.build_invalid_vectors()
    )


def test_vectors_cover_what_the_contract_names() -> None:
    names = {v["name"] for v in VALID}
    for required in (
        "non_ascii_text",
        "control_characters",
        "quotes_and_backslashes",
        "nested_objects_and_literals",
        "unknown_fields_are_hashed",
        "failure_cluster_reordered_keys",
        "key_order_utf16_bmp_private_use_vs_astral",
    ):
        assert required in names


@pytest.mark.parametrize("vector", VALID, ids=[v["name"] for v in VALID])
def test_canonical_form_and_hash_match_the_vector(vector: dict[str, Any]) -> None:
    body = {k: v for k, v in vector["payload"].items() if k not in {"cluster_id", "snapshot_hash"}}
    assert canonical_json(body).decode("utf-8") == vector["canonical"]
    assert snapshot_hash(vector["payload"]) == vector["snapshot_hash"]
    raw = json.dumps(vector["payload"], ensure_ascii=True).encode()
    if vector["name"] in vectors.CLUSTER_PAYLOAD_CASES:  # the contract's own check and hash
        assert snapshot_hash_of_json(raw) == vector["snapshot_hash"]
    else:  # the hash is defined on any object; the contract refuses what is not a payload
        with pytest.raises(DecodeError):
            snapshot_hash_of_json(raw)


def test_reordered_keys_and_identity_fields_do_not_change_the_hash() -> None:
    by_name = {v["name"]: v["snapshot_hash"] for v in VALID}
    assert by_name["failure_cluster_minimal"] == by_name["failure_cluster_reordered_keys"]
    minimal = by_name["failure_cluster_minimal"]
    assert minimal == by_name["failure_cluster_other_cluster_id_and_hash"]
    assert by_name["only_excluded_keys"] == by_name["empty_object"]
    assert len(set(by_name.values())) == len(by_name) - 3  # the three equalities above


def test_utf16_key_order_differs_from_code_point_order_in_the_vector() -> None:
    vector = next(v for v in VALID if v["name"] == "key_order_utf16_bmp_private_use_vs_astral")
    keys = list(json.loads(vector["canonical"]))
    assert keys.index("\U0001f600") < keys.index("\ue000")
    assert sorted(keys) != keys


@pytest.mark.parametrize("vector", INVALID, ids=[v["name"] for v in INVALID])
def test_invalid_vectors_are_refused_with_their_reason(vector: dict[str, str]) -> None:
    with pytest.raises(DecodeError) as caught:
        snapshot_hash_of_json(vector["payload_text"].encode())
    assert caught.value.reason.value == vector["reason"]
