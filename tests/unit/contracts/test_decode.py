"""decode/encode: every DecodeError reason, the ADR-057 bounds, the envelope rules."""

from __future__ import annotations

import contextlib
import json
import pickle
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from pydantic import ValidationError

from contracts import (
    FAILURE_CLUSTER_DETECTED,
    FAILURE_CLUSTER_SPEC,
    MAX_RECORD_BYTES,
    CanonicalizationError,
    DecodeError,
    DecodeReason,
    EventEnvelope,
    FailureClusterDetectedPayload,
    FailureRef,
    ThreadOpenedPayload,
    envelope_headers,
    snapshot_hash,
)
from tests.events import decode, decode_as, encode, record_key, registered_event_types
from tests.unit.contracts import factories as f


def reason_of(data: bytes) -> DecodeReason:
    with pytest.raises(DecodeError) as caught:
        decode(data)
    return caught.value.reason


def cluster_wire(**payload_changes: Any) -> dict[str, Any]:
    """A valid failure-cluster record, payload edited, hash and key recomputed to match."""
    obj = f.wire(f.cluster_event())
    obj["payload"].update(payload_changes)
    with contextlib.suppress(CanonicalizationError):  # unhashable payloads keep the old hash
        obj["payload"]["snapshot_hash"] = snapshot_hash(obj["payload"])
    obj["idempotency_key"] = f"{obj['payload']['cluster_id']}:{obj['payload']['snapshot_hash']}"
    return obj


def test_registered_event_types() -> None:
    assert registered_event_types() == (
        "platform.failure_cluster.detected",
        "work.item.enqueued",
        "work.item.state_changed",
        "work.ledger.entry_appended",
        "work.thread.opened",
    )


def test_a_helper_built_event_round_trips_exactly() -> None:
    envelope = f.cluster_event()
    data = encode(envelope)
    decoded = decode(data)
    assert decoded == envelope
    assert isinstance(decoded.payload, FailureClusterDetectedPayload)
    assert encode(decoded) == data


def test_wire_form_of_the_envelope() -> None:
    obj = f.wire(f.cluster_event())
    assert list(obj) == [
        "event_id",
        "event_type",
        "schema_version",
        "source",
        "target",
        "occurred_at",
        "idempotency_key",
        "correlation_id",
        "causation_id",
        "payload",
    ]
    assert obj["event_type"] == FAILURE_CLUSTER_DETECTED
    assert obj["schema_version"] == 1
    assert obj["source"] == obj["target"] == "platform"
    assert obj["occurred_at"] == "2026-11-21T11:00:01.123456Z"
    assert obj["correlation_id"] is None
    assert obj["payload"]["first_observed_at"] == "2026-11-21T10:00:00.123456Z"
    assert obj["idempotency_key"] == f"{f.CLUSTER_ID}:{obj['payload']['snapshot_hash']}"


def test_timestamps_are_written_with_six_digits_and_z() -> None:
    envelope = f.cluster_event(occurred_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    assert f.wire(envelope)["occurred_at"] == "2026-01-02T03:04:05.000000Z"


def test_the_helper_hashes_exactly_what_goes_on_the_wire() -> None:
    obj = f.wire(f.cluster_event())
    assert obj["payload"]["snapshot_hash"] == snapshot_hash(obj["payload"])


# ---- one test per reason --------------------------------------------------------------------


def test_not_json() -> None:
    assert reason_of(b"{not json") is DecodeReason.NOT_JSON
    assert reason_of(b"\xff\xfe{}") is DecodeReason.NOT_JSON  # not UTF-8
    assert reason_of(b'{"a": NaN}') is DecodeReason.NOT_JSON
    assert reason_of(b'{"a": "\\ud800"}') is DecodeReason.NOT_JSON  # lone surrogate escape
    assert reason_of(b"\xef\xbb\xbf{}") is DecodeReason.NOT_JSON  # byte order mark
    assert reason_of(b"") is DecodeReason.NOT_JSON


@pytest.mark.parametrize("data", [b"[]", b'"x"', b"1", b"null", b"true"])
def test_not_an_object(data: bytes) -> None:
    assert reason_of(data) is DecodeReason.NOT_AN_OBJECT


def test_unknown_event_type() -> None:
    obj = f.wire(f.cluster_event())
    obj["event_type"] = "platform.something.else"
    assert reason_of(f.dumps(obj)) is DecodeReason.UNKNOWN_EVENT_TYPE


@pytest.mark.parametrize(
    "edit",
    [
        lambda o: o.pop("event_type"),
        lambda o: o.update(event_type=7),
        lambda o: o.pop("event_id"),
        lambda o: o.update(event_id="not-a-uuid"),
        lambda o: o.update(schema_version=0),
        lambda o: o.update(schema_version="1"),
        lambda o: o.update(schema_version=1.0),
        lambda o: o.update(schema_version=True),
        lambda o: o.update(source=""),
        lambda o: o.pop("target"),
        lambda o: o.update(occurred_at="2026-11-21T10:00:00"),  # naive
        lambda o: o.update(occurred_at=1763719200),  # Unix time
        lambda o: o.update(occurred_at="2026-11-21"),
        lambda o: o.update(idempotency_key=""),
        lambda o: o.update(correlation_id="nope"),
        lambda o: o.pop("payload"),
    ],
)
def test_invalid_envelope(edit: Any) -> None:
    obj = f.wire(f.cluster_event())
    edit(obj)
    assert reason_of(f.dumps(obj)) is DecodeReason.INVALID_ENVELOPE


def test_an_envelope_error_wins_over_a_payload_error() -> None:
    obj = cluster_wire(severity="critical")
    obj["source"] = ""
    assert reason_of(f.dumps(obj)) is DecodeReason.INVALID_ENVELOPE


@pytest.mark.parametrize(
    "changes",
    [
        {"severity": "critical"},
        {"failure_count": 0},
        {"failure_count": "3"},
        {"failure_count": 2**53},
        {"rule_id": "x"},
        {"first_observed_at": "2026-11-21T12:00:00Z", "last_observed_at": "2026-11-21T11:00:00Z"},
        {"suggested_rule_stub": "s" * 20_001},
        {"evidence_bundle": "none"},
        {"extra_score": 0.5},  # numbers in hashed payloads are integers
        {"extra": {"deep": [1, 2.5]}},
    ],
)
def test_invalid_payload(changes: dict[str, Any]) -> None:
    assert reason_of(f.dumps(cluster_wire(**changes))) is DecodeReason.INVALID_PAYLOAD


def test_invalid_payload_names_the_field() -> None:
    with pytest.raises(DecodeError) as caught:
        decode(f.dumps(cluster_wire(severity="critical")))
    assert caught.value.reason is DecodeReason.INVALID_PAYLOAD
    assert "payload.severity" in caught.value.detail
    assert caught.value.event_type == FAILURE_CLUSTER_DETECTED


def test_a_float_in_an_evidence_item_is_invalid_payload_with_its_path() -> None:
    obj = f.wire(f.cluster_event())
    obj["payload"]["evidence_bundle"][3]["score"] = 0.75
    with pytest.raises(DecodeError) as caught:
        decode(f.dumps(obj))
    assert caught.value.reason is DecodeReason.INVALID_PAYLOAD
    assert "evidence_bundle[3].score" in caught.value.detail


@pytest.mark.parametrize("depth", [64, 300, 990])
def test_unknown_fields_nested_too_deep_are_invalid_payload_not_a_crash(depth: int) -> None:
    obj = cluster_wire(deep=None)
    data = f.dumps(obj).replace(b'"deep":null', b'"deep":' + b"[" * depth + b"]" * depth)
    assert reason_of(data) is DecodeReason.INVALID_PAYLOAD


def test_unknown_fields_nested_63_levels_below_the_payload_are_fine() -> None:
    obj = cluster_wire(deep=json.loads("[" * 63 + "]" * 63))
    assert decode(f.dumps(obj)).payload.model_extra == {"deep": obj["payload"]["deep"]}


def test_encode_reports_unwritable_envelope_extras_as_a_decode_error() -> None:
    obj = f.wire(f.thread_event())
    obj["x"] = None
    decoded = decode(f.dumps(obj).replace(b'"x":null', b'"x":' + b"[" * 1000 + b"]" * 1000))
    with pytest.raises(DecodeError) as caught:
        encode(decoded)
    assert caught.value.reason is DecodeReason.INVALID_ENVELOPE


def test_encode_writes_six_fractional_digits_also_for_whole_seconds() -> None:
    whole = datetime(2026, 1, 1, tzinfo=UTC)
    event = f.cluster_event(
        first_observed_at=whole,
        last_observed_at=whole,
        occurred_at=whole,
        evidence_bundle=[FailureRef(failure_id="a", observed_at=whole, summary="")],
    )
    data = encode(event)
    assert data.count(b'"2026-01-01T00:00:00.000000Z"') == 4
    assert b'"2026-01-01T00:00:00Z"' not in data
    assert decode(data) == event


def test_hash_mismatch() -> None:
    obj = f.wire(f.cluster_event())
    obj["payload"]["failure_count"] += 1  # content changed, hash and key left alone
    assert reason_of(f.dumps(obj)) is DecodeReason.HASH_MISMATCH


def test_hash_mismatch_when_an_unknown_field_is_added_without_rehashing() -> None:
    obj = f.wire(f.cluster_event())
    obj["payload"]["new_field"] = "x"
    assert reason_of(f.dumps(obj)) is DecodeReason.HASH_MISMATCH


def test_key_mismatch() -> None:
    obj = f.wire(f.cluster_event())
    obj["idempotency_key"] = f"{f.CLUSTER_ID}:{'0' * 32}"
    assert reason_of(f.dumps(obj)) is DecodeReason.KEY_MISMATCH


def test_key_mismatch_for_an_uppercase_cluster_id_in_the_key() -> None:
    obj = f.wire(f.cluster_event())
    obj["idempotency_key"] = obj["idempotency_key"].upper()
    assert reason_of(f.dumps(obj)) is DecodeReason.KEY_MISMATCH


_OTHER_SPELLINGS: dict[str, Callable[[UUID], str]] = {
    "upper": lambda u: str(u).upper(),
    "hex": lambda u: u.hex,
    "braced": lambda u: f"{{{u}}}",
    "urn": lambda u: f"urn:uuid:{u}",
    "mixed": lambda u: str(u)[:9] + str(u)[9:].upper(),
}
_UUID_FIELDS = (
    ("event_id",),
    ("correlation_id",),
    ("causation_id",),
    ("payload", "cluster_id"),
    ("payload", "rule_id"),
    ("payload", "workspace_id"),
)


@given(st.uuids(), st.sampled_from(list(_OTHER_SPELLINGS.values())), st.sampled_from(_UUID_FIELDS))
def test_a_uuid_in_any_other_spelling_is_refused_wherever_it_sits(
    value: UUID, spelling: Callable[[UUID], str], where: tuple[str, ...]
) -> None:
    # One spelling only: the hash is taken over the wire text, so a second spelling of a UUID
    # would give the same snapshot a second hash (and a second idempotency key).
    assume(spelling(value) != str(value))  # a UUID of digits only reads the same in upper case
    obj = cluster_wire()
    target = obj if len(where) == 1 else obj["payload"]
    target[where[-1]] = spelling(value)
    if where[-1] == "cluster_id":  # the key repeats the spelling: still refused, not a mismatch
        obj["idempotency_key"] = f"{spelling(value)}:{obj['payload']['snapshot_hash']}"
    expected = DecodeReason.INVALID_ENVELOPE if len(where) == 1 else DecodeReason.INVALID_PAYLOAD
    with pytest.raises(DecodeError) as caught:
        decode(f.dumps(obj))
    assert caught.value.reason is expected
    assert "lowercase hex, hyphenated" in caught.value.detail


@given(st.uuids())
def test_the_key_from_the_wire_equals_the_key_from_the_payload(cluster_id: UUID) -> None:
    obj = cluster_wire()
    obj["payload"]["cluster_id"] = str(cluster_id)
    obj["idempotency_key"] = f"{cluster_id}:{obj['payload']['snapshot_hash']}"
    decoded = decode(f.dumps(obj))
    assert decoded.payload.cluster_id == cluster_id
    wire_key = FAILURE_CLUSTER_SPEC.wire_idempotency_key
    assert wire_key is not None
    expected = FAILURE_CLUSTER_SPEC.idempotency_key(decoded.payload)
    assert wire_key(obj["payload"], decoded.payload) == expected == decoded.idempotency_key


@pytest.mark.parametrize(
    ("event", "wrong_key"),
    [
        (f.thread_event(), "other"),
        (f.enqueued_event(), f"{f.ITEM_ID}:2"),
        (f.state_changed_event(), f"{f.ITEM_ID}:applied:2"),
        (f.ledger_event(), str(f.ITEM_ID)),
    ],
)
def test_key_mismatch_for_work_events(event: EventEnvelope[Any], wrong_key: str) -> None:
    obj = f.wire(event)
    obj["idempotency_key"] = wrong_key
    assert reason_of(f.dumps(obj)) is DecodeReason.KEY_MISMATCH


def test_too_large_is_checked_before_parsing() -> None:
    assert reason_of(b"x" * (MAX_RECORD_BYTES + 1)) is DecodeReason.TOO_LARGE


def test_a_record_of_exactly_one_mebibyte_is_not_too_large() -> None:
    obj = cluster_wire()
    obj["padding"] = ""
    size = len(f.dumps(obj))
    obj["padding"] = "p" * (MAX_RECORD_BYTES - size)
    data = f.dumps(obj)
    assert len(data) == MAX_RECORD_BYTES
    assert decode(data).model_extra == {"padding": obj["padding"]}
    obj["padding"] += "p"
    assert reason_of(f.dumps(obj)) is DecodeReason.TOO_LARGE


def test_decode_error_is_a_value_error_and_pickles() -> None:
    error = DecodeError(DecodeReason.HASH_MISMATCH, "detail", event_type="t")
    assert isinstance(error, ValueError)
    copy = pickle.loads(pickle.dumps(error))  # noqa: S301 - our own object
    assert (copy.reason, copy.detail, copy.event_type) == (error.reason, "detail", "t")
    assert str(error) == "hash_mismatch: detail"


def test_reason_values_are_the_wire_spelling() -> None:
    assert {r.value for r in DecodeReason} == {
        "not_json",
        "not_an_object",
        "unknown_event_type",
        "invalid_envelope",
        "invalid_payload",
        "hash_mismatch",
        "key_mismatch",
        "too_large",
        "record_key_mismatch",
        # the consumer's (contracts.errors.CONSUMER_REASONS)
        "unexpected_event_type",
        "decode_error",
        "handler_rejected",
        "handler_error",
    }


# ---- ADR-057 bounds -------------------------------------------------------------------------


def test_evidence_bundle_holds_at_most_ten_items() -> None:
    assert len(f.cluster_event(evidence_bundle=f.evidence(10)).payload.evidence_bundle) == 10
    with pytest.raises(ValidationError, match="at most 10"):
        f.cluster_event(evidence_bundle=f.evidence(11))
    assert (
        reason_of(
            f.dumps(
                cluster_wire(
                    evidence_bundle=[
                        {
                            "failure_id": f"f{i}",
                            "observed_at": "2026-11-21T10:00:00Z",
                            "summary": "",
                        }
                        for i in range(11)
                    ]
                )
            )
        )
        is DecodeReason.INVALID_PAYLOAD
    )


def test_summary_holds_at_most_2000_characters() -> None:
    f.cluster_event(evidence_bundle=f.evidence(1, summary="é" * 2000))
    with pytest.raises(ValidationError, match="at most 2000"):
        f.cluster_event(evidence_bundle=f.evidence(1, summary="é" * 2001))


def test_suggested_rule_stub_holds_at_most_20000_characters() -> None:
    f.cluster_event(suggested_rule_stub="s" * 20_000)
    with pytest.raises(ValidationError, match="at most 20000"):
        f.cluster_event(suggested_rule_stub="s" * 20_001)


@pytest.mark.parametrize("severity", ["low", "medium", "high"])
def test_the_three_severities(severity: str) -> None:
    assert decode(encode(f.cluster_event(severity=severity))).payload.severity == severity


def test_bad_severity_failure_count_and_order_are_refused_at_build_time() -> None:
    with pytest.raises(ValidationError):
        f.cluster_event(severity="critical")
    with pytest.raises(ValidationError):
        f.cluster_event(failure_count=0)
    with pytest.raises(ValidationError, match="first_observed_at is after last_observed_at"):
        f.cluster_event(first_observed_at=f.T0 + timedelta(seconds=1), last_observed_at=f.T0)
    f.cluster_event(first_observed_at=f.T0, last_observed_at=f.T0)  # equal is fine


# ---- forward compatibility and timestamps ---------------------------------------------------


def test_unknown_fields_are_kept_through_decode_and_encode() -> None:
    obj = cluster_wire(blast_radius={"accounts": 3})
    obj["payload"]["evidence_bundle"][0]["resource"] = "arn:x"
    obj["payload"]["snapshot_hash"] = snapshot_hash(obj["payload"])
    obj["idempotency_key"] = f"{f.CLUSTER_ID}:{obj['payload']['snapshot_hash']}"
    obj["trace_flags"] = ["sampled"]
    decoded = decode(f.dumps(obj))
    assert decoded.model_extra == {"trace_flags": ["sampled"]}
    assert decoded.payload.model_extra == {"blast_radius": {"accounts": 3}}
    assert decoded.payload.evidence_bundle[0].model_extra == {"resource": "arn:x"}
    assert decode(encode(decoded)) == decoded
    assert f.wire(decoded) == obj


def test_a_newer_schema_version_decodes() -> None:
    obj = cluster_wire()
    obj["schema_version"] = 7
    assert decode(f.dumps(obj)).schema_version == 7


def test_missing_tracing_links_are_null() -> None:
    obj = cluster_wire()
    del obj["correlation_id"], obj["causation_id"]
    decoded = decode(f.dumps(obj))
    assert decoded.correlation_id is None
    assert decoded.causation_id is None


def test_offsets_are_accepted_and_normalized_to_utc() -> None:
    obj = cluster_wire()
    obj["occurred_at"] = "2026-11-21T12:00:00.5+02:00"
    decoded = decode(f.dumps(obj))
    assert decoded.occurred_at == datetime(2026, 11, 21, 10, 0, 0, 500000, tzinfo=UTC)
    assert decoded.occurred_at.tzinfo is UTC
    assert f.wire(decoded)["occurred_at"] == "2026-11-21T10:00:00.500000Z"


def test_naive_datetimes_are_refused_when_building() -> None:
    with pytest.raises(ValidationError, match="naive"):
        f.cluster_event(occurred_at=datetime(2026, 11, 21, 10, 0))  # noqa: DTZ001


def test_uuids_are_written_lowercase_hyphenated() -> None:
    decoded = decode(f.dumps(cluster_wire()))
    assert f.wire(decoded)["event_id"] == str(f.EVENT_ID) == str(f.EVENT_ID).lower()


# ---- encode refuses what decode would refuse ------------------------------------------------


def test_encode_refuses_a_hand_built_envelope_with_a_wrong_key() -> None:
    good = f.cluster_event()
    bad = good.model_copy(update={"idempotency_key": "whatever"})
    with pytest.raises(DecodeError) as caught:
        encode(bad)
    assert caught.value.reason is DecodeReason.KEY_MISMATCH
    assert encode(bad, verify=False)  # the caller may vouch for it


def test_encode_refuses_a_payload_whose_hash_is_stale() -> None:
    good = f.cluster_event()
    stale = good.payload.model_copy(update={"failure_count": 43})
    with pytest.raises(DecodeError) as caught:
        encode(good.model_copy(update={"payload": stale}))
    assert caught.value.reason is DecodeReason.HASH_MISMATCH


def test_encode_refuses_a_payload_of_the_wrong_type() -> None:
    thread = f.thread_event()
    mixed = f.cluster_event().model_copy(update={"payload": thread.payload})
    with pytest.raises(DecodeError) as caught:
        encode(mixed)
    assert caught.value.reason is DecodeReason.INVALID_PAYLOAD


def test_encode_refuses_an_unregistered_event_type() -> None:
    odd = f.thread_event().model_copy(update={"event_type": "nobody.knows"})
    with pytest.raises(DecodeError) as caught:
        encode(odd)
    assert caught.value.reason is DecodeReason.UNKNOWN_EVENT_TYPE


# ---- typed decode, record keys, headers -----------------------------------------------------


def test_decode_as_checks_the_payload_type() -> None:
    data = encode(f.thread_event())
    assert decode_as(data, ThreadOpenedPayload).payload.kind == "story_generate_epic"
    with pytest.raises(DecodeError) as caught:
        decode_as(data, FailureClusterDetectedPayload)
    assert caught.value.reason is DecodeReason.UNKNOWN_EVENT_TYPE


@pytest.mark.parametrize(
    ("event", "idempotency_key", "key"),
    [
        (f.cluster_event(), None, str(f.CLUSTER_ID)),
        (f.thread_event(), str(f.THREAD_ID), str(f.THREAD_ID)),
        (f.enqueued_event(attempt=3), f"{f.ITEM_ID}:3", "epic:epic-7"),
        (f.state_changed_event("dead_letter"), f"{f.ITEM_ID}:dead_letter:2", "epic:epic-7"),
        (
            f.ledger_event(),
            str(UUID("a1b2c3d4-0000-4000-8000-000000000003")),
            str(f.THREAD_ID),
        ),
    ],
)
def test_keys_and_headers(event: EventEnvelope[Any], idempotency_key: str | None, key: str) -> None:
    if idempotency_key is not None:
        assert event.idempotency_key == idempotency_key
    assert record_key(event) == key.encode()
    assert envelope_headers(event) == [
        ("event_type", event.event_type.encode()),
        ("idempotency_key", event.idempotency_key.encode()),
    ]
    assert decode(encode(event)) == event


def test_work_events_use_the_work_source_and_keep_float_input() -> None:
    event = f.enqueued_event()
    assert (event.source, event.target) == ("work", "work")
    assert decode(encode(event)).payload.input["temperature"] == 0.2


def test_envelopes_and_payloads_are_immutable() -> None:
    event = f.cluster_event()
    with pytest.raises(ValidationError):
        event.idempotency_key = "x"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        event.payload.failure_count = 1  # type: ignore[misc]
    with pytest.raises(ValidationError):
        event.payload.evidence_bundle[0].summary = "x"  # type: ignore[misc]
    assert isinstance(event.payload.evidence_bundle, tuple)
