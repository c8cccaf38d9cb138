"""Views: a record read as its type's light view gets exactly the verdict of the full decode.

``EventRegistry.read_record`` takes a fast path (no pydantic model) for records in the form
spectral writes and the full decode for anything else; whatever the fast path accepts, the full
decode must accept with the same values, and every refusal must be the full decode's own (the
same reason, the same detail). Hypothesis mutates valid records of every type (hostile values,
members deleted and added, other spellings) and holds the two together; the published vectors
are run through the engine's decode step both ways.
"""

from __future__ import annotations

import copy
import json
import re
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from contracts import DecodeError, EventEnvelope, UtcDatetime, canonical_json, parse_utc
from contracts.envelope import ENVELOPE_FIELDS
from contracts.failure_cluster import (
    FailureClusterDetectedPayload,
    FailureClusterView,
    FailureRef,
    _WrittenPayload,
    _WrittenRecord,
    _WrittenRef,
)
from contracts.fields import (
    UUID_PATTERN,
    are_wire_uuids,
    is_wire_uuid,
    written_instants,
    written_utc,
)
from spectral.engine.decode import RecordDecoder
from spectral.engine.handler import Delivery
from tests.events import EVENTS, decode, decode_record, encode, spec_for
from tests.unit.contracts import factories as f
from tests.unit.contracts.test_envelope_vectors import RECORDS, SIZED, key_of, value_of
from tests.unit.contracts.test_fields import digit_soup
from tests.unit.contracts.test_schema_agreement import mutated_records

CLUSTERS = "platform.failure_cluster.detected"


def _verdict(read: Any, value: bytes | None, key: bytes | None) -> tuple[str, Any]:
    try:
        return "valid", read(value, key)
    except DecodeError as exc:
        return exc.reason.value, exc.detail


def _record_key(obj: dict[str, Any]) -> bytes | None:
    payload = obj.get("payload")
    if not isinstance(payload, dict):
        return None
    for name in ("cluster_id", "lock_scope", "thread_id"):
        if isinstance(payload.get(name), str):
            return str(payload[name]).encode("utf-8", "surrogatepass")
    return None


def assert_same_verdict(value: bytes | None, key: bytes | None) -> str:
    """``read_record`` and ``decode_record`` agree on the record; returns the path it took."""
    slow, envelope = _verdict(decode_record, value, key)
    fast, reading = _verdict(EVENTS.read_record, value, key)
    assert fast == slow, f"read_record says {fast}, decode_record {slow}: {value!r}"
    if slow != "valid":
        assert reading == envelope  # the same detail
        return "refused"
    payload, idempotency_key, event_id, event_type, full = reading
    assert idempotency_key == envelope.idempotency_key
    assert str(event_id) == str(envelope.event_id)
    assert event_type == envelope.event_type
    spec = spec_for(event_type)
    if spec.view_of is None:
        assert full == envelope
        assert payload == envelope.payload
        return "model"
    raw = orjson.loads(value or b"")["payload"]
    assert payload == spec.view_of(envelope, raw)
    if full is not None:
        assert full == envelope
        return "slow view"
    return "fast view"


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_records(), st.booleans())
def test_a_view_is_read_exactly_when_the_full_decode_accepts_and_holds_its_values(
    record: tuple[str, dict[str, Any]], wrong_key: bool
) -> None:
    _, obj = record
    text = json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass")
    key = b"another-key" if wrong_key else _record_key(obj)
    event(assert_same_verdict(text, key))


@settings(max_examples=300, deadline=None)
@given(f.cluster_events())
def test_every_valid_failure_cluster_record_is_read_on_the_fast_path_or_the_slow_one(
    envelope: EventEnvelope[Any],
) -> None:
    value = encode(envelope)
    path = assert_same_verdict(value, str(envelope.payload.cluster_id).encode())
    event(path)
    assert path in {"fast view", "slow view"}


def test_spectrals_own_records_take_the_fast_path() -> None:
    obj, key = f.written_cluster()
    value = orjson.dumps(obj)
    *_, full = EVENTS.read_record(value, key)
    assert full is None


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda o: o.update(newer_field=1), id="an unknown envelope member"),
        pytest.param(
            lambda o: o["payload"].update(newer_field=[1]), id="an unknown payload member"
        ),
        pytest.param(
            lambda o: o["payload"]["evidence_bundle"][0].update(source="scanner"),
            id="an unknown evidence member",
        ),
        pytest.param(lambda o: o.update(occurred_at="2026-11-21T10:00:00.5+01:00"), id="an offset"),
        pytest.param(
            lambda o: o["payload"].update(first_observed_at="2026-01-01T00:00:00Z"),
            id="no fraction",
        ),
        pytest.param(lambda o: o["payload"].pop("suggested_rule_stub"), id="a member left out"),
        pytest.param(
            lambda o: o["payload"]["evidence_bundle"][0].update(summary="C:\\u0000 \\ dir"),
            id="a backslash and a literal u0000",
        ),
    ],
)
def test_other_forms_take_the_slow_path_with_the_same_verdict(change: Any) -> None:
    obj, key = f.written_cluster()
    change(obj)
    f.rehash(obj)
    path = assert_same_verdict(orjson.dumps(obj), key)
    assert path in {"slow view", "fast view"}


def _valid_record() -> tuple[bytes, bytes]:
    obj, key = f.written_cluster(suggested_rule_stub='rule "a" { when x > 3 }\nthen page')
    obj["payload"]["evidence_bundle"][0]["summary"] = 'a "quoted" path C:\\temp, née ✓ 🚀'
    f.rehash(obj)
    return orjson.dumps(obj), key


def test_a_record_with_escapes_and_non_ascii_text_takes_the_fast_path() -> None:
    value, key = _valid_record()
    assert b'\\"' in value
    assert assert_same_verdict(value, key) == "fast view"


def _members_twice(value: bytes) -> bytes:
    """The record with its payload's severity written twice, the first time wrongly."""
    return value.replace(b'"severity":', b'"severity":"urgent","severity":', 1)


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(_members_twice, id="a member twice (the last wins)"),
        pytest.param(
            lambda v: v.replace(b'"severity":', b'"event_type":"x","severity":', 1),
            id="an envelope member repeated inside the payload",
        ),
        pytest.param(lambda v: v + b" " * (1024 * 1024), id="padded past the size limit"),
        pytest.param(lambda v: b"\xef\xbb\xbf" + v, id="a byte order mark"),
        pytest.param(lambda v: v + b" x", id="trailing content"),
        pytest.param(
            lambda v: v.replace(b"n\xc3\xa9e", b"n\xed\xa0\x80e"), id="a surrogate as UTF-8"
        ),
        pytest.param(lambda v: v.replace(b"n\xc3\xa9e", b"n\xffe"), id="bytes that are not UTF-8"),
        pytest.param(
            lambda v: v.replace(b"n\xc3\xa9e", b"n\\ud800e"), id="an escaped lone surrogate"
        ),
        pytest.param(lambda v: v.replace(b"n\xc3\xa9e", b"n\\u00e9e"), id="an escaped character"),
        pytest.param(lambda v: v.replace(b"n\xc3\xa9e", b"n\\u0000e"), id="an escaped U+0000"),
        pytest.param(lambda v: v.replace(b"n\xc3\xa9e", b"n\x01e"), id="a raw control character"),
        pytest.param(
            lambda v: v.replace(b'"failure_count":', b'"failure_count":1.0,"x":', 1),
            id="a float count",
        ),
        pytest.param(lambda v: v.replace(b"{", b"{\n\t ", 2), id="whitespace between members"),
        pytest.param(
            lambda v: v.replace(
                b'"event_type":"platform.failure_cluster.detected"',
                b'"event_type":"work.item.enqueued"',
            ),
            id="another event type",
        ),
    ],
)
def test_byte_level_edits_get_the_full_decodes_verdict(edit: Any) -> None:
    value, key = _valid_record()
    edited = edit(value)
    assert edited != value
    assert_same_verdict(edited, key)
    topic = CLUSTERS
    decoder = RecordDecoder("c", {topic: topic}, EVENTS, views=True)
    without = RecordDecoder("c", {topic: topic}, EVENTS)
    viewed, modelled = (_delivered(d, topic, key, edited) for d in (decoder, without))
    assert type(viewed) is type(modelled)
    if not isinstance(viewed, Delivery):
        assert (viewed.reason, viewed.detail) == (modelled.reason, modelled.detail)


@settings(max_examples=1000, deadline=None)
@given(st.data())
def test_a_record_edited_byte_by_byte_gets_the_full_decodes_verdict(data: st.DataObject) -> None:
    value, key = _valid_record()
    event(assert_same_verdict(f.byte_edited(data, value), key))


def test_the_written_form_is_escaped_as_the_canonical_form_over_every_code_point() -> None:
    """The fast path hashes the payload as msgspec writes it back: every character must be
    written exactly as the canonical form (orjson) writes it."""
    encode_sorted = msgspec.json.Encoder(order="sorted").encode
    for start in range(0, 0x110000, 0x1000):
        text = "".join(chr(c) for c in range(start, start + 0x1000) if not 0xD800 <= c < 0xE000)
        assert encode_sorted(text) == canonical_json(text)


def test_a_view_holds_the_wire_text_of_uuids_and_utc_instants() -> None:
    envelope = f.cluster_event()
    value = encode(envelope)
    payload, *_ = EVENTS.read_record(value, str(envelope.payload.cluster_id).encode())
    assert isinstance(payload, FailureClusterView)
    assert payload.cluster_id == str(envelope.payload.cluster_id)
    assert payload.rule_id == str(envelope.payload.rule_id)
    assert payload.last_observed_at == envelope.payload.last_observed_at
    assert payload.last_observed_at.tzinfo is not None
    assert payload.evidence_bundle == f.wire(envelope)["payload"]["evidence_bundle"]


# ---- the engine's decode step, both ways ------------------------------------------------------


def _delivered(decoder: RecordDecoder, topic: str, key: bytes | None, value: bytes | None) -> Any:
    record = SimpleNamespace(
        topic=topic, partition=0, offset=7, key=key, value=value, timestamp=5, headers=()
    )
    return decoder.decode(record)


@pytest.mark.parametrize("vector", RECORDS + SIZED, ids=lambda v: str(v.get("name", "")))
def test_the_engine_gives_every_published_vector_the_same_verdict_with_views_or_without(
    vector: dict[str, Any],
) -> None:
    topic = vector["topic_event_type"]
    with_views = RecordDecoder("vectors", {topic: topic}, EVENTS, views=True)
    without = RecordDecoder("vectors", {topic: topic}, EVENTS)
    key, value = key_of(vector), value_of(vector)
    viewed, modelled = (_delivered(d, topic, key, value) for d in (with_views, without))
    assert type(viewed) is type(modelled)
    if not isinstance(viewed, Delivery):
        assert (viewed.reason, viewed.detail) == (modelled.reason, modelled.detail)
        return
    # built on demand from the record's bytes (compared member by member: some vectors nest
    # deeper than pydantic's equality can recurse)
    assert type(viewed.envelope) is type(modelled.envelope)
    assert viewed.envelope.event_id == modelled.envelope.event_id
    assert viewed.envelope.payload.__pydantic_fields_set__ == (
        modelled.envelope.payload.__pydantic_fields_set__
    )
    assert viewed.idempotency_key == modelled.idempotency_key
    assert (viewed.raw, viewed.key, viewed.offset) == (modelled.raw, modelled.key, 7)


def test_a_handler_without_views_gets_the_pydantic_payload_and_its_envelope_at_once() -> None:
    envelope = f.cluster_event()
    value = encode(envelope)
    decoder = RecordDecoder("c", {CLUSTERS: CLUSTERS}, EVENTS)
    delivered = _delivered(decoder, CLUSTERS, str(envelope.payload.cluster_id).encode(), value)
    assert isinstance(delivered, Delivery)
    assert delivered.payload == envelope.payload
    assert delivered.decoded == envelope


def test_a_delivery_built_around_an_envelope_reads_as_before() -> None:
    envelope = f.cluster_event()
    raw = encode(envelope)
    delivery = Delivery.of(
        envelope, topic=CLUSTERS, partition=1, offset=2, key=b"k", raw=raw, timestamp_ms=3
    )
    assert delivery.envelope is envelope
    assert delivery.payload == envelope.payload
    assert delivery.idempotency_key == envelope.idempotency_key
    assert delivery.value == raw
    assert copy.copy(delivery) == delivery
    assert decode(raw) == envelope


# ---- the fast path's field checks against the contract's own patterns ------------------------

written_texts = st.builds(
    "{}-{}-{}T{}:{}:{}.{}Z".format,
    st.sampled_from(["1969", "1970", "2026", "9998", "9999", "0000", "\uff12\uff10\uff12\uff16"]),
    st.sampled_from(["00", "01", "02", "12", "13", "1a"]),
    st.sampled_from(["00", "01", "28", "29", "30", "31", "32"]),
    st.sampled_from(["00", "09", "23", "24", "99"]),
    st.sampled_from(["00", "59", "60"]),
    st.sampled_from(["00", "59", "60", "6\x00"]),
    st.sampled_from(
        ["000000", "123456", "12345", "1234567", "12345a", "\u0661\u0662\u0663\u0664\u0665\u0666"]
    ),
)
uuid_texts = st.uuids().map(str) | st.text(
    st.sampled_from("0123456789abcdefABCDEF-x\x00é"), max_size=40
)


one_char_off = st.builds(
    lambda u, index, char: str(u)[:index] + char + str(u)[index + 1 :],
    st.uuids(),
    st.integers(0, 35),
    st.sampled_from("-0aAfgG\x00\u00e9\u0661 "),
)


@given(uuid_texts | one_char_off)
def test_the_uuid_check_is_the_contracts_pattern(text: str) -> None:
    pattern = re.compile(UUID_PATTERN.removesuffix("$") + r"\Z")
    assert is_wire_uuid(text) == bool(pattern.match(text))


@given(written_texts | digit_soup | st.text(max_size=30))
def test_a_written_timestamp_reads_as_the_field_reads_it(text: str) -> None:
    read = written_utc(text)
    try:
        field = _TIMESTAMP.validate_python(text)
    except ValidationError:
        field = None
    if read is not None:
        assert read == field
        assert read.tzinfo is UTC
        assert read == parse_utc(text)
    elif field is not None:  # another form the contract accepts: never the written one
        assert not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", text, re.ASCII)


_TIMESTAMP = TypeAdapter(UtcDatetime)


def _joins(pieces: st.SearchStrategy[str]) -> st.SearchStrategy[list[str]]:
    """Lists of pieces, some cut and glued again at another place (a run of pieces that only
    concatenates to valid texts) or joined by the checks' own separator."""

    def regrouped(texts: list[str], cut: int) -> list[str]:
        joined = "".join(texts)
        cut %= len(joined) + 1
        return [joined[:cut], joined[cut:]]

    plain = st.lists(pieces, min_size=1, max_size=6)
    return (
        plain
        | st.builds(regrouped, plain, st.integers(0, 400))
        | plain.map(lambda texts: [" ".join(texts), *texts[1:]])
    )


@given(_joins(uuid_texts | one_char_off | st.uuids().map(str)))
def test_uuids_checked_together_are_each_checked_alone(texts: list[str]) -> None:
    assert are_wire_uuids(texts) == all(map(is_wire_uuid, texts))


_valid_written = st.datetimes(
    min_value=datetime(1970, 1, 1),  # noqa: DTZ001 - a naive bound for naive values
    max_value=datetime(9998, 12, 31),  # noqa: DTZ001
).map(lambda moment: moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))


@given(_joins(written_texts | digit_soup | _valid_written))
def test_timestamps_read_together_are_each_read_alone(texts: list[str]) -> None:
    alone = [written_utc(text) for text in texts]
    assert written_instants(texts) == (None if None in alone else alone)


def test_the_written_form_of_a_record_has_the_contracts_members() -> None:
    assert set(_WrittenRecord.__struct_fields__) == set(ENVELOPE_FIELDS)
    assert set(_WrittenPayload.__struct_fields__) == set(FailureClusterDetectedPayload.model_fields)
    assert set(_WrittenRef.__struct_fields__) == set(FailureRef.model_fields)
