"""What a record decodes to, read independently of ``contracts``: every value of a valid record
has the type and value the wire text denotes, and the record key is judged by the table of the
spec's section 3.

The verdicts themselves are held to the JSON Schemas by ``test_schema_agreement`` (the same
hostile mutations); this property holds the *envelope* of every record the consumer accepts to
an independent reading of its wire object, so a faster decoder cannot return other types (an
offset-carrying ``tzinfo``, a UUID subclass, a string where a UUID belongs) or other values, and
the record key check to the spec, whatever path a record takes through the decoder.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from enum import Enum
from typing import Any
from uuid import UUID

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from contracts import MAX_SAFE_INTEGER, DecodeError, DecodeReason
from tests.events import decode, decode_record
from tests.unit.contracts.test_schema_agreement import (
    TIMESTAMP_FIELDS,
    UUID_FIELDS,
    mutated_records,
    read_instant,
)

RECORD_KEY_FIELD = {
    "platform.failure_cluster.detected": "cluster_id",
    "work.thread.opened": "thread_id",
    "work.item.enqueued": "lock_scope",
    "work.item.state_changed": "lock_scope",
    "work.ledger.entry_appended": "thread_id",
}
"""Section 3 of the spec: the payload field whose text is the Kafka record key."""


def as_doubles(value: Any) -> Any:
    """``value`` with every integer beyond the I-JSON range read as an IEEE double, as the spec
    lets readers read numbers outside hashed payloads (section 1, unknown fields; a work item's
    ``input``): a decoder may keep such an integer exact or round it, never change it otherwise.
    """
    if type(value) is int and abs(value) > MAX_SAFE_INTEGER:
        return float(value)
    if type(value) is dict:
        return {name: as_doubles(item) for name, item in value.items()}
    if type(value) is list:
        return [as_doubles(item) for item in value]
    return value


def assert_reads_as_wire(model: BaseModel, wire: dict[str, Any], path: str) -> None:
    """Every field of ``model`` holds what ``wire`` (its parsed JSON object) says, typed."""
    fields = type(model).model_fields
    extra = {name: value for name, value in wire.items() if name not in fields}
    assert as_doubles(model.__pydantic_extra__ or {}) == as_doubles(extra), path
    for name, info in fields.items():
        if name in wire:
            assert_value(getattr(model, name), wire[name], name, f"{path}.{name}")
        else:  # an absent field holds its default (a required one is refused before this)
            default = info.get_default(call_default_factory=True)
            assert getattr(model, name) == default, f"{path}.{name}: absent, not its default"


def assert_value(value: object, text: Any, name: str, path: str) -> None:
    if isinstance(value, BaseModel):
        assert_reads_as_wire(value, text, path)
    elif type(value) is tuple:
        assert type(text) is list, path
        assert len(value) == len(text), path
        for index, (item, item_text) in enumerate(zip(value, text, strict=True)):
            assert_value(item, item_text, name, f"{path}[{index}]")
    elif name in TIMESTAMP_FIELDS and value is not None:
        assert type(value) is datetime, path
        assert value.tzinfo is UTC, f"{path}: tzinfo {value.tzinfo!r}"
        assert value == read_instant(text), path
    elif name in UUID_FIELDS and value is not None:
        assert type(value) is UUID, path
        assert str(value) == text, path  # the one spelling, read back exactly
    elif value is None:
        assert text is None, path
    elif isinstance(value, Enum):
        assert value.value == text, path
    else:
        assert type(value) is type(text), f"{path}: {type(value).__name__} for {text!r}"
        assert as_doubles(value) == as_doubles(text), path


keys = st.sampled_from(["right", "upper", "null", "empty", "other", "latin-1"])


def record_key(obj: dict[str, Any], kind: str) -> bytes | None:
    payload = obj.get("payload")
    field = RECORD_KEY_FIELD.get(str(obj.get("event_type")), "")
    right = payload.get(field) if isinstance(payload, dict) else None
    text = right if isinstance(right, str) else "k"
    return {
        "right": text.encode("utf-8", "surrogatepass"),
        "upper": text.upper().encode("utf-8", "surrogatepass"),
        "null": None,
        "empty": b"",
        "other": b"6f1c2b1e-4d0a-4c59-9a57-1f0e9f3b7a10",
        "latin-1": b"\xff" + text.encode("utf-8", "surrogatepass"),
    }[kind]


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_records(), keys)
def test_an_accepted_record_decodes_to_its_wire_values_and_its_key_is_judged_by_the_spec(
    record: tuple[str, dict[str, Any]], key_kind: str
) -> None:
    _, obj = record
    text = json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass")
    key = record_key(obj, key_kind)
    refused: DecodeError | None = None
    try:
        envelope = decode(text)
    except DecodeError as exc:
        refused = exc
    if refused is not None:
        assert refused.detail, "a refusal says why"
        assert _reason(text, key) is refused.reason, "the record key is checked after the value"
        return
    assert_reads_as_wire(envelope, obj, "$")
    expected_key = obj["payload"][RECORD_KEY_FIELD[envelope.event_type]].encode()
    reason = _reason(text, key)
    if key == expected_key:
        assert reason is None
    else:
        assert reason is DecodeReason.RECORD_KEY_MISMATCH, (key, expected_key)


def _reason(value: bytes, key: bytes | None) -> DecodeReason | None:
    try:
        decode_record(value, key)
    except DecodeError as exc:
        return exc.reason
    return None
