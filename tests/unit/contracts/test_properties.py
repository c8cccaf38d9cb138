"""Hypothesis properties of the hash and the codec."""

from __future__ import annotations

import contextlib
import json
import random
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from contracts import (
    DecodeError,
    DecodeReason,
    EventEnvelope,
    FailureClusterDetectedPayload,
    snapshot_hash,
)
from tests.events import decode, encode
from tests.unit.contracts import factories as f

Path = tuple[str | int, ...]


def shuffled(value: Any, rng: random.Random) -> Any:
    """The same JSON value with every object's keys in a random order."""
    if isinstance(value, dict):
        keys = list(value)
        rng.shuffle(keys)
        return {key: shuffled(value[key], rng) for key in keys}
    if isinstance(value, list):
        return [shuffled(item, rng) for item in value]
    return value


def reformatted(value: Any, rng: random.Random) -> str:
    """JSON text of ``value`` with random key order, whitespace and escaping."""
    indent = rng.choice([None, 0, 1, 4, "\t"])
    separators = rng.choice([(",", ":"), (", ", ": "), (" ,", " :  ")])
    text = json.dumps(
        shuffled(value, rng),
        indent=indent,
        separators=separators,
        ensure_ascii=rng.choice([True, False]),
    )
    return rng.choice(["", " ", "\n", "\r\n\t"]) + text + rng.choice(["", " \n"])


def leaf_paths(value: Any, path: Path = ()) -> list[Path]:
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in leaf_paths(item, (*path, key))]
    if isinstance(value, list):
        return [p for index, item in enumerate(value) for p in leaf_paths(item, (*path, index))]
    return [path]


def get_at(value: Any, path: Path) -> Any:
    for part in path:
        value = value[part]
    return value


def set_at(value: Any, path: Path, new: Any) -> None:
    for part in path[:-1]:
        value = value[part]
    value[path[-1]] = new


def same_json(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def wire_payload(event: EventEnvelope[Any]) -> dict[str, Any]:
    payload: dict[str, Any] = f.wire(event)["payload"]
    return payload


@given(f.cluster_events(), st.randoms(use_true_random=False))
def test_the_hash_does_not_depend_on_key_order_or_whitespace(
    event: EventEnvelope[FailureClusterDetectedPayload], rng: random.Random
) -> None:
    payload = wire_payload(event)
    again = orjson.loads(reformatted(payload, rng))
    assert snapshot_hash(again) == snapshot_hash(payload) == event.payload.snapshot_hash


@given(f.cluster_events(), st.randoms(use_true_random=False))
def test_a_reformatted_record_still_decodes_to_the_same_event(
    event: EventEnvelope[FailureClusterDetectedPayload], rng: random.Random
) -> None:
    assert decode(reformatted(f.wire(event), rng).encode()) == event


@given(f.json_objects, st.randoms(use_true_random=False))
def test_the_hash_of_any_object_ignores_order_and_whitespace(
    obj: dict[str, Any], rng: random.Random
) -> None:
    assert snapshot_hash(orjson.loads(reformatted(obj, rng))) == snapshot_hash(obj)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(f.cluster_events(), st.data())
def test_changing_any_hashed_value_changes_the_hash(
    event: EventEnvelope[FailureClusterDetectedPayload], data: st.DataObject
) -> None:
    payload = wire_payload(event)
    paths = [p for p in leaf_paths(payload) if p[0] not in {"cluster_id", "snapshot_hash"}]
    path = data.draw(st.sampled_from(paths))
    new = data.draw(f.json_leaf)
    assume(not same_json(new, get_at(payload, path)))
    before = snapshot_hash(payload)
    set_at(payload, path, new)
    assert snapshot_hash(payload) != before
    with pytest.raises(DecodeError) as caught:
        decode(f.dumps({**f.wire(event), "payload": payload}))
    assert caught.value.reason in {DecodeReason.HASH_MISMATCH, DecodeReason.INVALID_PAYLOAD}


@given(f.cluster_events(), st.data())
def test_adding_or_removing_a_field_changes_the_hash(
    event: EventEnvelope[FailureClusterDetectedPayload], data: st.DataObject
) -> None:
    payload = wire_payload(event)
    before = snapshot_hash(payload)
    name = data.draw(f.non_empty.filter(lambda k: k not in payload))
    assert snapshot_hash({**payload, name: data.draw(f.json_leaf)}) != before
    dropped = data.draw(
        st.sampled_from([k for k in payload if k not in {"cluster_id", "snapshot_hash"}])
    )
    assert snapshot_hash({k: v for k, v in payload.items() if k != dropped}) != before


@given(f.cluster_events(), st.uuids())
def test_cluster_id_is_not_hashed(
    event: EventEnvelope[FailureClusterDetectedPayload], other: Any
) -> None:
    payload = wire_payload(event)
    assert snapshot_hash({**payload, "cluster_id": str(other)}) == snapshot_hash(payload)


@given(f.cluster_events(), st.data())
def test_a_float_anywhere_in_a_cluster_payload_is_invalid_payload(
    event: EventEnvelope[FailureClusterDetectedPayload], data: st.DataObject
) -> None:
    obj = f.wire(event)
    payload = obj["payload"]
    containers: list[Any] = [payload, *payload["evidence_bundle"]]
    target = data.draw(st.sampled_from(containers))
    key = data.draw(st.sampled_from([*target, "new_field"]))
    target[key] = data.draw(
        st.floats(allow_nan=False, allow_infinity=False)
        | st.lists(st.floats(-1e9, 1e9), min_size=1)
    )
    assume(key not in {"cluster_id", "snapshot_hash"})
    with pytest.raises(DecodeError) as caught:
        decode(f.dumps(obj))
    assert caught.value.reason is DecodeReason.INVALID_PAYLOAD


@given(f.ANY_EVENT)
def test_encode_decode_round_trips_every_model(event: EventEnvelope[Any]) -> None:
    data = encode(event)
    decoded = decode(data)
    assert decoded == event
    assert type(decoded.payload) is type(event.payload)
    assert encode(decoded) == data


# ---- a poison record is a DecodeError, never another exception --------------------------------

json_any = st.recursive(
    f.json_leaf | st.floats() | st.integers(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(f.text, inner, max_size=4),
    max_leaves=12,
)
_STAMP = "2026-11-21T10:00:00.123456+01:00"
timestampish = st.text(alphabet="0123456789-:.TtZz+ ", max_size=32) | st.builds(
    lambda cut, end, insert: _STAMP[:cut] + insert + _STAMP[end:],
    st.integers(0, len(_STAMP)),
    st.integers(0, len(_STAMP)),
    st.text(alphabet="0.:+-Zz", max_size=2),
)


def decodes_or_refuses(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        decode(data)


@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_crash_decode(data: bytes) -> None:
    decodes_or_refuses(data)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(f.ANY_EVENT, st.data())
def test_a_mutated_record_is_decoded_or_refused_never_a_crash(
    event: EventEnvelope[Any], data: st.DataObject
) -> None:
    obj = f.wire(event)
    paths: list[Path] = [(), *leaf_paths(obj)]
    path = data.draw(st.sampled_from(paths))
    new = data.draw(json_any | timestampish)
    if path:
        set_at(obj, path, new)
        decodes_or_refuses(json.dumps(obj).encode())  # stdlib: big integers, NaN as written
    else:
        decodes_or_refuses(json.dumps(new).encode())


non_objects = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=5,
).filter(lambda value: not isinstance(value, dict))


@given(f.ANY_EVENT, non_objects, st.booleans())
def test_a_payload_that_is_not_an_object_breaks_the_envelope(
    event: EventEnvelope[Any], payload: Any, also_a_broken_envelope_field: bool
) -> None:
    """The envelope's rule for payload is "an object": whatever else a payload is (null, a
    number, a string, an array of anything), the record is invalid_envelope, never
    invalid_payload, with or without another envelope error beside it."""
    wire = f.wire(event)
    wire["payload"] = payload
    if also_a_broken_envelope_field:
        wire["event_id"] = "not-a-uuid"
    with pytest.raises(DecodeError) as caught:
        decode(orjson.dumps(wire))
    assert caught.value.reason is DecodeReason.INVALID_ENVELOPE
