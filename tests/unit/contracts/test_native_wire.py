"""The Rust fast path (``contracts._wire``, native/src/lib.rs) answers what the Python one does.

``contracts.failure_cluster._read_view`` is the reference: the engine's tests hold it (through
``EventRegistry.read_record``) to the full decode. The Rust build replaces it in the spec, so
here every answer of the two is compared: generated records, records mutated member by member
and byte by byte, and every bound of the contract on both sides of its limit (a bound the Rust
side forgot would accept what the full decode refuses). The build is required: without it this
module fails, it does not skip (``make install`` builds it).
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from contracts import EventEnvelope
from contracts.canonical import MAX_SAFE_INTEGER
from contracts.failure_cluster import (
    FAILURE_CLUSTER_SPEC,
    MAX_EVIDENCE_ITEMS,
    MAX_FAILURE_ID_CHARS,
    MAX_RULE_STUB_CHARS,
    MAX_SUMMARY_CHARS,
    NATIVE_READ_VIEW,
    _read_view,
)
from contracts.fields import epoch_micros, format_utc
from contracts.wire import MAX_RECORD_BYTES
from tests.unit.contracts import factories as f
from tests.unit.contracts.test_schema_agreement import mutated_records


def _native() -> Any:
    assert NATIVE_READ_VIEW is not None, (
        "contracts._wire is not built: install Rust (rustup) and run `make install`"
    )
    return NATIVE_READ_VIEW


def test_the_spec_reads_views_with_the_rust_build() -> None:
    assert FAILURE_CLUSTER_SPEC.read_view is _native()


def test_a_build_of_other_sources_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``contracts._wire`` left from other sources (its arguments differ: one that still
    built datetimes took ``utc``) fails the import saying what to do, not with a bare
    TypeError from deep in the module."""
    from contracts import _wire, failure_cluster  # noqa: PLC0415

    def stale(*, view: object, utc: object, **limits: object) -> None:
        raise AssertionError  # pragma: no cover - never reached: utc is missing

    monkeypatch.setattr(_wire, "Checker", stale)
    with pytest.raises(ImportError, match=r"other sources.*make install"):
        failure_cluster._native_read_view()


def test_the_build_records_the_sources_of_this_checkout() -> None:
    """``make install`` built ``contracts._wire`` from this checkout's native/src: the digest
    its build script recorded is the one the import computes."""
    from contracts import _wire, failure_cluster  # noqa: PLC0415

    assert failure_cluster.native_sources_digest(failure_cluster.NATIVE_DIR) == _wire.SOURCES


@pytest.mark.parametrize("change", ["a comment", "a file more", "no record"])
def test_a_build_of_an_earlier_state_of_the_sources_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, change: str
) -> None:
    """An editable install whose Rust side was not rebuilt after native/src changed — any
    change, one that keeps the arguments too — or a build from before builds recorded their
    sources: the import fails saying what to do, instead of running the earlier code."""
    from contracts import _wire, failure_cluster  # noqa: PLC0415

    native = tmp_path / "native"
    shutil.copytree(failure_cluster.NATIVE_DIR, native, ignore=shutil.ignore_patterns("target"))
    if change == "a comment":
        lib = native / "src" / "lib.rs"
        lib.write_bytes(lib.read_bytes() + b"// one line more\n")
    elif change == "a file more":
        (native / "src" / "more.rs").write_text("// a module not built yet\n")
    else:
        monkeypatch.delattr(_wire, "SOURCES")
    monkeypatch.setattr(failure_cluster, "NATIVE_DIR", native)
    with pytest.raises(ImportError, match=r"other sources.*make install"):
        failure_cluster._native_read_view()


def test_an_installed_package_is_not_compared_with_sources_it_does_not_hold(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No native/ beside the package (a wheel: its build and its Python were made together):
    nothing to compare, the build is used."""
    from contracts import failure_cluster  # noqa: PLC0415

    assert failure_cluster.native_sources_digest(tmp_path / "native") is None
    monkeypatch.setattr(failure_cluster, "NATIVE_DIR", tmp_path / "native")
    assert failure_cluster._native_read_view() is not None


def same_answer(value: bytes, key: bytes | None) -> str:
    """Both fast paths give the same answer for the record; returns which."""
    python = _read_view(value, key)
    native = _native()(value, key)
    assert native == python, f"Rust {native!r}, Python {python!r}: {value!r}"
    if native is None or python is None:
        return "refused"
    view = native[0]
    assert view.first_observed_at.tzinfo == python[0].first_observed_at.tzinfo
    assert type(view.evidence) is bytes
    return "read"


def _rehashed(obj: dict[str, Any]) -> bytes:
    f.rehash(obj)
    return _dumps(obj)


def _dumps(obj: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(obj)
    except TypeError:  # an integer past 64 bits
        return json.dumps(obj, ensure_ascii=False).encode()


@settings(max_examples=500, deadline=None)
@given(f.cluster_events())
def test_every_valid_record_gets_the_same_answer(envelope: EventEnvelope[Any]) -> None:
    value = orjson.dumps(f.wire(envelope))
    event(same_answer(value, str(envelope.payload.cluster_id).encode()))


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_records(), st.booleans(), st.booleans())
def test_a_mutated_record_gets_the_same_answer(
    record: tuple[str, dict[str, Any]], wrong_key: bool, ascii_only: bool
) -> None:
    _, obj = record
    text = json.dumps(obj, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    payload = obj.get("payload")
    cluster_id = payload.get("cluster_id") if isinstance(payload, dict) else None
    key = (
        b"another-key"
        if wrong_key or not isinstance(cluster_id, str)
        else cluster_id.encode("utf-8", "surrogatepass")
    )
    event(same_answer(text, key))


def _escaped_record() -> tuple[bytes, bytes]:
    obj, key = f.written_cluster(
        suggested_rule_stub='rule "a" { when x > 3 }\nthen\tpage\x08\x0c\r/'
    )
    obj["payload"]["evidence_bundle"][0]["summary"] = 'a "quoted" path C:\\temp, née ✓ 🚀 \x7f'
    return _rehashed(obj), key


@settings(max_examples=2000, deadline=None)
@given(st.data())
def test_a_record_edited_byte_by_byte_gets_the_same_answer(data: st.DataObject) -> None:
    value, key = _escaped_record()
    event(same_answer(f.byte_edited(data, value), key))


def test_escapes_and_text_outside_ascii_are_read() -> None:
    value, key = _escaped_record()
    assert same_answer(value, key) == "read"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60), st.text(max_size=30))
def test_any_text_in_a_summary_and_a_stub_gets_the_same_answer(summary: str, stub: str) -> None:
    obj, key = f.written_cluster(suggested_rule_stub=stub)
    obj["payload"]["evidence_bundle"][0]["summary"] = summary
    # (a control character other than \b \f \n \r \t is written as \u00XX: the slow path's)
    event(same_answer(_rehashed(obj), key))


def _refs(count: int) -> list[dict[str, Any]]:
    return [
        {"failure_id": f"f-{i}", "observed_at": "2026-01-02T03:04:05.000006Z", "summary": "s"}
        for i in range(count)
    ]


def _at(instant: str) -> dict[str, Any]:
    return {"first_observed_at": instant, "last_observed_at": instant}


# Each bound at its limit (read) and past it (refused), in characters outside ASCII too.
BOUNDS = [
    ("count at the largest safe integer", {"failure_count": MAX_SAFE_INTEGER}, True),
    ("count past it", {"failure_count": MAX_SAFE_INTEGER + 1}, False),
    ("count zero", {"failure_count": 0}, False),
    ("count negative", {"failure_count": -1}, False),
    ("count beyond 64 bits", {"failure_count": 2**64 + 1}, False),
    ("count a float", {"failure_count": 2.0}, False),
    ("count a boolean", {"failure_count": True}, False),
    ("items at the limit", {"evidence_bundle": _refs(MAX_EVIDENCE_ITEMS)}, True),
    ("items past it", {"evidence_bundle": _refs(MAX_EVIDENCE_ITEMS + 1)}, False),
    ("no items", {"evidence_bundle": []}, True),
    ("stub at the limit", {"suggested_rule_stub": "🚀" * MAX_RULE_STUB_CHARS}, True),
    ("stub past it", {"suggested_rule_stub": "é" * (MAX_RULE_STUB_CHARS + 1)}, False),
    ("stub null", {"suggested_rule_stub": None}, True),
    ("stub empty", {"suggested_rule_stub": ""}, True),
    ("severity high", {"severity": "high"}, True),
    ("severity unknown", {"severity": "critical"}, False),
    ("severity in capitals", {"severity": "LOW"}, False),
    ("first year", _at("1970-01-01T00:00:00.000000Z"), True),
    ("before it", _at("1969-12-31T23:59:59.999999Z"), False),
    ("last year", _at("9998-12-31T23:59:59.999999Z"), True),
    ("after it", _at("9999-01-01T00:00:00.000000Z"), False),
    ("a leap day", _at("2024-02-29T00:00:00.000000Z"), True),
    ("a leap day of a 400th year", _at("2000-02-29T00:00:00.000000Z"), True),
    ("no leap day in a 100th year", _at("2100-02-29T00:00:00.000000Z"), False),
    ("no leap day", _at("2023-02-29T00:00:00.000000Z"), False),
    ("day 31 of a short month", _at("2026-04-31T00:00:00.000000Z"), False),
    ("month 13", _at("2026-13-01T00:00:00.000000Z"), False),
    ("month 0", _at("2026-00-01T00:00:00.000000Z"), False),
    ("day 0", _at("2026-01-00T00:00:00.000000Z"), False),
    ("hour 24", _at("2026-01-01T24:00:00.000000Z"), False),
    ("minute 60", _at("2026-01-01T23:60:00.000000Z"), False),
    ("second 60", _at("2026-01-01T23:59:60.000000Z"), False),
    ("digits outside ASCII", _at("2026-01-01T23:59:5\u0661.000000Z"), False),
    ("an offset", _at("2026-01-01T23:59:59.000000+00:00"), False),
    ("a lowercase t", _at("2026-01-01t23:59:59.000000Z"), False),
    ("no fraction", _at("2026-01-01T23:59:59Z"), False),
    (
        "first after last",
        {
            "first_observed_at": "2026-01-01T00:00:00.000001Z",
            "last_observed_at": "2026-01-01T00:00:00.000000Z",
        },
        False,
    ),
    ("a UUID in capitals", {"rule_id": "A4D70DFC-F333-4EB0-9B66-59EAB3BFCD5D"}, False),
    ("a UUID without hyphens", {"workspace_id": "a4d70dfcf3334eb09b6659eab3bfcd5d"}, False),
    ("a UUID in braces", {"rule_id": "{a4d70dfc-f333-4eb0-9b66-59eab3bfcd5d}"}, False),
]


@pytest.mark.parametrize(
    ("change", "read"), [(c, r) for _, c, r in BOUNDS], ids=[b[0] for b in BOUNDS]
)
def test_every_payload_bound_on_both_sides_of_its_limit(change: dict[str, Any], read: bool) -> None:
    obj, key = f.written_cluster(**change)
    assert same_answer(_rehashed(obj), key) == ("read" if read else "refused")


@settings(max_examples=500, deadline=None)
@given(
    st.datetimes(
        min_value=datetime(1970, 1, 1),  # noqa: DTZ001 - hypothesis draws naive bounds
        max_value=datetime(9998, 12, 31, 23, 59, 59, 999999),  # noqa: DTZ001
    )
)
def test_a_views_times_are_the_written_instants_in_microseconds(moment: datetime) -> None:
    """The Rust build counts the days of the calendar itself: every written instant of the
    bound, leap days and centuries included, is the microseconds Python counts for it."""
    instant = moment.replace(tzinfo=UTC)
    obj, key = f.written_cluster(**_at(format_utc(instant)))
    assert same_answer(_rehashed(obj), key) == "read"
    read = _native()(_rehashed(obj), key)
    assert read is not None
    view = read[0]
    assert view.first_observed_us == view.last_observed_us == epoch_micros(instant)
    assert view.last_observed_at == instant


REF_BOUNDS = [
    ("failure id at the limit", {"failure_id": "ü" * MAX_FAILURE_ID_CHARS}, True),
    ("failure id past it", {"failure_id": "x" * (MAX_FAILURE_ID_CHARS + 1)}, False),
    ("failure id empty", {"failure_id": ""}, False),
    ("summary at the limit", {"summary": "🚀" * MAX_SUMMARY_CHARS}, True),
    ("summary past it", {"summary": "é" * (MAX_SUMMARY_CHARS + 1)}, False),
    ("summary empty", {"summary": ""}, True),
    ("an observation before the first year", {"observed_at": "1969-12-31T23:59:59.999999Z"}, False),
    ("an observation on no real day", {"observed_at": "2026-02-30T00:00:00.000000Z"}, False),
    ("a member more", {"source": "scanner"}, False),
]


@pytest.mark.parametrize(
    ("change", "read"), [(c, r) for _, c, r in REF_BOUNDS], ids=[b[0] for b in REF_BOUNDS]
)
def test_every_evidence_bound_on_both_sides_of_its_limit(
    change: dict[str, Any], read: bool
) -> None:
    obj, key = f.written_cluster()
    obj["payload"]["evidence_bundle"][-1].update(change)
    assert same_answer(_rehashed(obj), key) == ("read" if read else "refused")


ENVELOPE_BOUNDS = [
    ("schema version at the largest safe integer", {"schema_version": MAX_SAFE_INTEGER}, True),
    ("schema version past it", {"schema_version": MAX_SAFE_INTEGER + 1}, False),
    ("schema version zero", {"schema_version": 0}, False),
    ("an empty source", {"source": ""}, False),
    ("an empty target", {"target": ""}, False),
    ("a null correlation id", {"correlation_id": None}, True),
    ("a correlation id", {"correlation_id": "d4864adf-882a-47b0-b447-8dc90fe67f98"}, True),
    (
        "a correlation id in capitals",
        {"correlation_id": "D4864ADF-882A-47B0-B447-8DC90FE67F98"},
        False,
    ),
    ("a causation id that is no UUID", {"causation_id": "x"}, False),
    ("an occurrence before the first year", {"occurred_at": "1969-12-31T23:59:59.999999Z"}, False),
    ("another event type", {"event_type": "work.item.enqueued"}, False),
    ("a member more", {"trace": "x"}, False),
]


@pytest.mark.parametrize(
    ("change", "read"),
    [(c, r) for _, c, r in ENVELOPE_BOUNDS],
    ids=[b[0] for b in ENVELOPE_BOUNDS],
)
def test_every_envelope_bound_on_both_sides_of_its_limit(
    change: dict[str, Any], read: bool
) -> None:
    obj, key = f.written_cluster()
    value = _rehashed(obj)
    obj.update(change)
    assert same_answer(_dumps(obj), key) == ("read" if read else "refused")
    assert _native()(value, key) is not None


def test_the_record_key_and_the_idempotency_key_must_match() -> None:
    obj, key = f.written_cluster()
    value = _rehashed(obj)
    assert same_answer(value, key) == "read"
    for other in (None, b"", key.upper(), key + b" "):
        assert same_answer(value, other) == "refused"
    written = obj["idempotency_key"]
    cluster_id, digest = written.split(":")
    for other_key in (
        written.replace(":", "-"),
        written[:-1],
        written + "0",
        f"{cluster_id}::{digest}",
        f"{cluster_id}:{digest.upper()}",
        f"{digest}:{cluster_id}",
        cluster_id,
    ):
        obj["idempotency_key"] = other_key
        assert same_answer(orjson.dumps(obj), key) == "refused", other_key


def test_the_size_limit_counts_every_byte() -> None:
    obj, key = f.written_cluster()
    value = _rehashed(obj)
    at_limit = value + b" " * (MAX_RECORD_BYTES - len(value))
    assert same_answer(at_limit, key) == "read"
    assert same_answer(at_limit + b" ", key) == "refused"


def test_a_wrong_hash_is_refused() -> None:
    obj, key = f.written_cluster()
    _rehashed(obj)
    obj["payload"]["failure_count"] += 1
    assert same_answer(orjson.dumps(obj), key) == "refused"


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=2_000), st.none() | st.binary(max_size=40))
def test_any_bytes_are_answered_none_never_a_panic(value: bytes, key: bytes | None) -> None:
    """A panic in Rust would reach Python as a BaseException, past the decode step's fallback."""
    assert _native()(value, key) is None


@pytest.mark.parametrize(
    "value",
    [
        b"[" * 100_000,
        b'{"payload":' * 50_000,
        b'{"event_id":' + b'"' + b"\\\\" * 300_000 + b'"}',
        b'{"payload":{"evidence_bundle":[' + b"{}," * 100_000 + b"{}]}}",
        b"\xff" * 1_000,
    ],
    ids=["deep arrays", "deep objects", "long escapes", "many items", "not UTF-8"],
)
def test_hostile_shapes_are_answered_none(value: bytes) -> None:
    assert _native()(value, b"k") is None


def test_other_argument_types_raise_type_error_not_a_panic() -> None:
    """The decode step falls back to the full decode on an Exception (a TypeError here)."""
    for value, key in [(bytearray(b"{}"), b"k"), (b"{}", "k"), ("{}", None)]:
        with pytest.raises(TypeError):
            _native()(value, key)
