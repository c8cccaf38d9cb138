"""ADR-057: the ``platform.failure_cluster.detected`` snapshot signal.

Payload (schema_version 1), every field always written (``null`` included)::

    cluster_id           UUID     stable identity minted by FailureClusterService (D1)
    snapshot_hash        string   32 lowercase hex digits, see below
    rule_id              UUID
    workspace_id         UUID
    severity             "low" | "medium" | "high"  (D4)
    failure_count        integer  >= 1
    first_observed_at    timestamp  <= last_observed_at
    last_observed_at     timestamp
    evidence_bundle      array of FailureRef, at most 10
    suggested_rule_stub  string of at most 20,000 characters, or null

    FailureRef: failure_id (string, 1..256 characters), observed_at (timestamp),
                summary (string of at most 2,000 characters)

Fields this version does not know are accepted, kept, and hashed.

``snapshot_hash`` = xxh3-128, as 32 lowercase hex digits, of the RFC 8785 canonical JSON of
the payload object as it is on the wire minus the keys ``cluster_id`` and ``snapshot_hash``
(:func:`contracts.canonical.snapshot_hash`).
``idempotency_key`` = ``"{cluster_id}:{snapshot_hash}"`` (UUIDs have one spelling: lowercase,
hyphenated).
The Kafka record key is the cluster_id, so one cluster's snapshots stay in order on one partition.

Producers build envelopes only through :func:`failure_cluster_detected_event`, which computes
both; decoding (``EventRegistry.decode``) verifies both (``hash_mismatch``, ``key_mismatch``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from operator import attrgetter
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Self, cast, get_args
from uuid import UUID

import msgspec
import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)
from xxhash import xxh3_64, xxh3_128_hexdigest

from contracts.canonical import (
    MAX_SAFE_INTEGER,
    CanonicalizationError,
    check_json_values,
    snapshot_hash,
    snapshot_hash_prechecked,
)
from contracts.envelope import EventEnvelope
from contracts.errors import DecodeError, DecodeReason, describe_validation_errors
from contracts.fields import (
    MAX_YEAR,
    MIN_YEAR,
    PositiveInt,
    UtcDatetime,
    Uuid,
    are_wire_uuids,
    epoch_micros,
    from_epoch_micros,
    written_instants,
)
from contracts.spec import EventSpec
from contracts.wire import MAX_RECORD_BYTES, find_nul, parse_json_object

FAILURE_CLUSTER_DETECTED: Final = "platform.failure_cluster.detected"
FAILURE_CLUSTER_SCHEMA_VERSION: Final = 1
MAX_EVIDENCE_ITEMS: Final = 10
MAX_SUMMARY_CHARS: Final = 2_000
MAX_RULE_STUB_CHARS: Final = 20_000
MAX_FAILURE_ID_CHARS: Final = 256

Severity = Literal["low", "medium", "high"]
"""ADR-057 D4: the three-tier severity."""

SnapshotHash = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]
RuleStub = Annotated[str, StringConstraints(max_length=MAX_RULE_STUB_CHARS)]


class FailureRef(BaseModel):
    """One representative failure of a cluster (a small, typed evidence record)."""

    model_config = ConfigDict(frozen=True, extra="allow", use_attribute_docstrings=True)

    failure_id: Annotated[str, StringConstraints(min_length=1, max_length=MAX_FAILURE_ID_CHARS)]
    """The failure's identifier in the scan system (opaque text)."""
    observed_at: UtcDatetime
    """When the failure was observed."""
    summary: Annotated[str, StringConstraints(max_length=MAX_SUMMARY_CHARS)]
    """Human-readable description of the failure."""


class FailureClusterDetectedPayload(BaseModel):
    """The full current snapshot of one failure cluster (ADR-057 D3)."""

    model_config = ConfigDict(frozen=True, extra="allow", use_attribute_docstrings=True)

    cluster_id: Uuid
    """Stable identity of the cluster, minted by FailureClusterService at first detection."""
    snapshot_hash: SnapshotHash
    """xxh3-128 of the canonical payload without cluster_id and snapshot_hash (32 hex digits)."""
    rule_id: Uuid
    """The rule whose evaluations failed."""
    workspace_id: Uuid
    """The workspace the failures were observed in."""
    severity: Severity
    """Three-tier severity derived by FailureClusterService."""
    failure_count: PositiveInt
    """Number of failures in the cluster."""
    first_observed_at: UtcDatetime
    """Earliest failure observed in the cluster."""
    last_observed_at: UtcDatetime
    """Latest failure observed in the cluster (not before first_observed_at)."""
    evidence_bundle: Annotated[tuple[FailureRef, ...], Field(max_length=MAX_EVIDENCE_ITEMS)]
    """Up to ten representative failures."""
    suggested_rule_stub: RuleStub | None = None
    """Optional model-written rule stub for the operator to start from."""

    @model_validator(mode="after")
    def _observed_in_order(self) -> Self:
        if self.first_observed_at > self.last_observed_at:
            raise ValueError("first_observed_at is after last_observed_at")
        return self


def _idempotency_key(payload: FailureClusterDetectedPayload) -> str:
    return f"{payload.cluster_id}:{payload.snapshot_hash}"


def _wire_idempotency_key(raw: Mapping[str, Any], payload: FailureClusterDetectedPayload) -> str:
    """:func:`_idempotency_key`, taking cluster_id as written: the contract reads a UUID only
    in the spelling ``str(UUID)`` gives, and ``str(UUID)`` is the costliest step of the key on
    the consumer hot path.
    """
    return f"{raw['cluster_id']}:{payload.snapshot_hash}"


def _record_key(payload: FailureClusterDetectedPayload) -> str:
    return str(payload.cluster_id)


def _wire_record_key(raw: Mapping[str, Any], payload: FailureClusterDetectedPayload) -> str:
    """:func:`_record_key`, taking cluster_id as written (see :func:`_wire_idempotency_key`)."""
    del payload  # the validated payload proved raw["cluster_id"] is str(payload.cluster_id)
    return cast("str", raw["cluster_id"])


def _verify_hash(raw: Mapping[str, Any], payload: FailureClusterDetectedPayload) -> None:
    """``raw`` (the wire payload) hashes to ``payload.snapshot_hash``.

    Every known field was validated as a string, an integer or null, so only the unknown
    fields (top level and per evidence item) need the JSON-value check before hashing.
    """
    try:
        if payload.__pydantic_extra__:  # sits where the payload object does: depth 0
            check_json_values(payload.__pydantic_extra__, "payload", 0)
        for index, ref in enumerate(payload.evidence_bundle):
            if ref.__pydantic_extra__:  # payload > evidence_bundle > item: depth 2
                check_json_values(ref.__pydantic_extra__, f"payload.evidence_bundle[{index}]", 2)
        actual = snapshot_hash_prechecked(raw)
    except CanonicalizationError as exc:
        raise DecodeError(
            DecodeReason.INVALID_PAYLOAD, str(exc), event_type=FAILURE_CLUSTER_DETECTED
        ) from None
    if actual != payload.snapshot_hash:
        raise DecodeError(
            DecodeReason.HASH_MISMATCH,
            f"payload.snapshot_hash is {payload.snapshot_hash} but the payload hashes to {actual}",
            event_type=FAILURE_CLUSTER_DETECTED,
        )


class FailureClusterView(msgspec.Struct, frozen=True, gc=False):
    """A failure-cluster snapshot as handlers read it: the payload's fields, checked against
    the contract like the pydantic model, in their lightest form — UUIDs as their one wire
    spelling (``str``), timestamps as whole microseconds since the Unix epoch (``int``; as UTC
    datetimes through :attr:`first_observed_at` and :attr:`last_observed_at`), the evidence
    bundle as JSON text. One C-built object per record (no model tree, not tracked by the
    garbage collector); ``Delivery.envelope`` still gives the full
    :class:`FailureClusterDetectedPayload` to whoever asks for it."""

    cluster_id: str
    snapshot_hash: str
    rule_id: str
    workspace_id: str
    severity: Severity
    failure_count: int
    first_observed_us: int
    """``first_observed_at`` in microseconds since the Unix epoch: compared, ordered and sent to
    the database as an integer (a datetime costs the database driver ~0.7 us to encode and a
    comparison a Python call)."""
    last_observed_us: int
    """``last_observed_at`` in microseconds since the Unix epoch."""
    suggested_rule_stub: str | None
    evidence: bytes
    """The evidence bundle as JSON text: the wire's items, members (unknown ones included) and
    values, members sorted, no whitespace (what a database stores as ``jsonb`` from it is what
    it would store from the wire's text)."""

    @property
    def first_observed_at(self) -> datetime:
        """The first observation, a UTC datetime (built on each access)."""
        return from_epoch_micros(self.first_observed_us)

    @property
    def last_observed_at(self) -> datetime:
        """The last observation, a UTC datetime (built on each access)."""
        return from_epoch_micros(self.last_observed_us)

    @property
    def evidence_bundle(self) -> list[dict[str, Any]]:
        """The evidence bundle parsed (a list of JSON objects, unknown members included), on
        each access."""
        bundle: list[dict[str, Any]] = orjson.loads(self.evidence)
        return bundle


_Text = Annotated[str, msgspec.Meta(min_length=1)]
_Count = Annotated[int, msgspec.Meta(ge=1, le=MAX_SAFE_INTEGER)]


class _WrittenRef(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A FailureRef in the form spectral writes (the layouts of its texts checked after)."""

    failure_id: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_FAILURE_ID_CHARS)]
    observed_at: str
    summary: Annotated[str, msgspec.Meta(max_length=MAX_SUMMARY_CHARS)]


class _WrittenPayload(
    msgspec.Struct, forbid_unknown_fields=True, gc=False, kw_only=True, omit_defaults=True
):
    """The payload in the form spectral writes: the model's fields and bounds, every one
    present (an absent ``suggested_rule_stub`` is not hashed, a null one is: only the slow path
    tells them apart), no other member (``snapshot_hash`` is left to the hash's comparison: a
    digest equal to the computed one has the pattern's 32 lowercase hex digits).

    ``cluster_id`` and ``snapshot_hash`` default to the empty string, which neither may be
    (it is not a UUID, and no digest is empty: :func:`_read_view` refuses both), so that,
    emptied, they are left out when the struct is written back: what remains, written with
    sorted members, is the text the snapshot hash is taken over."""

    cluster_id: str = ""
    snapshot_hash: str = ""
    rule_id: str
    workspace_id: str
    severity: Severity
    failure_count: _Count
    first_observed_at: str
    last_observed_at: str
    evidence_bundle: Annotated[list[_WrittenRef], msgspec.Meta(max_length=MAX_EVIDENCE_ITEMS)]
    suggested_rule_stub: Annotated[str, msgspec.Meta(max_length=MAX_RULE_STUB_CHARS)] | None


class _WrittenRecord(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """The envelope in the form spectral writes (ENVELOPE_FIELDS, no other member)."""

    event_id: str
    event_type: Literal["platform.failure_cluster.detected"]
    schema_version: _Count
    source: _Text
    target: _Text
    occurred_at: str
    idempotency_key: _Text
    payload: _WrittenPayload
    correlation_id: str | None = None
    causation_id: str | None = None


_read_written: Final = msgspec.json.Decoder(_WrittenRecord).decode
_sorted_json: Final = msgspec.json.Encoder(order="sorted").encode
_EVIDENCE_START: Final = len('{"evidence_bundle":')
"""Where the evidence bundle's value starts in the hashed text (its first member)."""
_COUNT_MEMBER: Final = b',"failure_count":'
"""The member after the evidence bundle."""
_OBSERVED_AT: Final = attrgetter("observed_at")
_UNICODE_ESCAPE: Final = b"\\u"


def _read_view(data: bytes, key: bytes | None) -> tuple[FailureClusterView, str, str] | None:
    """``(view, idempotency_key, event_id)`` of a record (``data``: its value, ``key``: its
    record key) that passes every check of ``decode_record``, or None to let the full decode
    decide. Only records in the form spectral writes take this path: no unknown member
    anywhere, every member present, every timestamp in the written form, no ``\\u`` escape in
    the text (so no U+0000 and no lone surrogate), at most :data:`MAX_RECORD_BYTES`; anything
    else goes the slow way, which also words the refusals. So whatever this accepts, the full
    decode accepts with the same values (a property test holds the two together).

    The bytes are parsed straight into structs by msgspec (types, bounds and presence checked
    in C; it refuses every text orjson refuses, and a duplicate member's last value wins in
    both); the UUIDs' spelling and the timestamps' layout are checked for all of them at once
    (:func:`~contracts.fields.are_wire_uuids`, :func:`~contracts.fields.written_instants`). The
    hash is taken over the payload struct written back with sorted members, ``cluster_id`` and
    ``snapshot_hash`` emptied and so left out (the same bytes as orjson's canonical form of the
    parsed payload less those two: both escape exactly the characters RFC 8785 escapes, a test
    holds them together over every code point); the view's evidence is the first member's value
    in the same text."""
    if len(data) > MAX_RECORD_BYTES or (data.find(b"\\") >= 0 and _UNICODE_ESCAPE in data):
        return None  # (memchr first: most records hold no backslash at all)
    try:
        record = _read_written(data)
    except Exception:  # noqa: BLE001 - whatever msgspec refuses, the full decode words
        return None
    payload = record.payload
    cluster_id = payload.cluster_id
    uuids = [record.event_id, cluster_id, payload.rule_id, payload.workspace_id]
    if record.correlation_id is not None:
        uuids.append(record.correlation_id)
    if record.causation_id is not None:
        uuids.append(record.causation_id)
    if key != cluster_id.encode() or not are_wire_uuids(uuids):
        return None
    instants = written_instants(
        [
            payload.first_observed_at,
            payload.last_observed_at,
            record.occurred_at,
            *map(_OBSERVED_AT, payload.evidence_bundle),
        ]
    )
    digest = payload.snapshot_hash
    idempotency_key = record.idempotency_key
    if instants is None or instants[0] > instants[1] or idempotency_key != f"{cluster_id}:{digest}":
        return None
    payload.cluster_id = payload.snapshot_hash = ""  # left out of the text written back
    hashed = _sorted_json(payload)
    if xxh3_128_hexdigest(hashed) != digest:
        return None
    view = FailureClusterView(
        cluster_id,
        digest,
        payload.rule_id,
        payload.workspace_id,
        payload.severity,
        payload.failure_count,
        epoch_micros(instants[0]),
        epoch_micros(instants[1]),
        payload.suggested_rule_stub,
        hashed[_EVIDENCE_START : hashed.find(_COUNT_MEMBER, _EVIDENCE_START)],
    )
    return view, idempotency_key, record.event_id


def _native_read_view() -> Callable[[bytes, bytes | None], Any] | None:
    """The Rust build of :func:`_read_view` (``native/src/lib.rs``: the same checks and the
    same answers, ~2 us a record less; tests/unit/contracts/test_native_wire.py holds the two
    together), bound to this module's limits; None where the package was built without it."""
    try:
        import contracts._wire as wire  # noqa: PLC0415 - optional: a Rust build
    except ImportError:
        return None
    # The digest of the sources it was built from (native/build.rs; None: a build from before
    # builds recorded it).
    built: str | None = getattr(wire, "SOURCES", None)
    here = native_sources_digest(NATIVE_DIR)
    if here is not None and here != built:
        msg = (
            f"contracts._wire was built from other sources than this checkout's native/ (built "
            f"from {built or 'sources it does not record'}, native/src is {here}): rebuild "
            "it (make install)"
        )
        raise ImportError(msg)
    try:
        return _bound_checker(wire.Checker)
    except TypeError as exc:  # a build of other sources: its arguments differ
        msg = (
            f"contracts._wire was built from other sources than this checkout ({exc}): "
            "rebuild it (make install)"
        )
        raise ImportError(msg) from exc


NATIVE_DIR: Final = Path(__file__).resolve().parents[1] / "native"
"""The Rust sources of ``contracts._wire`` in a checkout (an installed wheel has none)."""


def native_sources_digest(native: Path) -> str | None:
    """The digest native/build.rs records of ``native``'s ``src/`` (xxh3-64, hex: every file
    sorted by name, each one's name, a NUL, its bytes, a NUL); None where ``native`` is not the
    crate's folder (an installed package: its build and its Python were made together)."""
    src = native / "src"
    if not (native / "Cargo.toml").is_file() or not src.is_dir():
        return None
    digest = xxh3_64()
    for path in sorted(src.iterdir(), key=lambda p: p.name.encode()):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _bound_checker(checker: Callable[..., Any]) -> Callable[[bytes, bytes | None], Any]:
    """``contracts._wire.Checker`` bound to this module's view class and limits."""
    bound: Callable[[bytes, bytes | None], Any] = checker(
        view=FailureClusterView,
        event_type=FAILURE_CLUSTER_DETECTED,
        severities=list(get_args(Severity)),
        max_record_bytes=MAX_RECORD_BYTES,
        max_safe_integer=MAX_SAFE_INTEGER,
        max_evidence_items=MAX_EVIDENCE_ITEMS,
        max_summary_chars=MAX_SUMMARY_CHARS,
        max_rule_stub_chars=MAX_RULE_STUB_CHARS,
        max_failure_id_chars=MAX_FAILURE_ID_CHARS,
        min_year=MIN_YEAR,
        max_year=MAX_YEAR,
    )
    return bound


NATIVE_READ_VIEW: Final = _native_read_view()
"""The Rust build of :func:`_read_view` bound to this module's limits, or None where the package
was built without it (the spec then offers :func:`_read_view` itself)."""


def _view_of(
    envelope: EventEnvelope[FailureClusterDetectedPayload], raw: Mapping[str, Any]
) -> FailureClusterView:
    """The view of a record the full decode accepted (``raw``: its payload as parsed)."""
    payload = envelope.payload
    return FailureClusterView(
        raw["cluster_id"],  # the wire text: the validated payload proved it is str(UUID)
        payload.snapshot_hash,
        raw["rule_id"],
        raw["workspace_id"],
        payload.severity,
        payload.failure_count,
        epoch_micros(payload.first_observed_at),
        epoch_micros(payload.last_observed_at),
        payload.suggested_rule_stub,
        orjson.dumps(raw["evidence_bundle"], option=orjson.OPT_SORT_KEYS),
    )


FAILURE_CLUSTER_SPEC: Final = EventSpec(
    event_type=FAILURE_CLUSTER_DETECTED,
    schema_version=FAILURE_CLUSTER_SCHEMA_VERSION,
    payload_model=FailureClusterDetectedPayload,
    idempotency_key=_idempotency_key,
    record_key=_record_key,
    default_source="platform",
    default_target="platform",
    verify_wire=_verify_hash,
    wire_idempotency_key=_wire_idempotency_key,
    wire_record_key=_wire_record_key,
    hashed_payload=True,
    idempotency_key_rule="{cluster_id}:{snapshot_hash}",
    record_key_rule="{cluster_id}",
    read_view=NATIVE_READ_VIEW or _read_view,
    view_of=_view_of,
)

_PLACEHOLDER_HASH: Final = "0" * 32


def failure_cluster_detected_event(
    *,
    cluster_id: UUID,
    rule_id: UUID,
    workspace_id: UUID,
    severity: Severity,
    failure_count: int,
    first_observed_at: datetime,
    last_observed_at: datetime,
    evidence_bundle: Sequence[FailureRef],
    suggested_rule_stub: str | None = None,
    event_id: UUID | None = None,
    occurred_at: datetime | None = None,
    correlation_id: UUID | None = None,
    causation_id: UUID | None = None,
) -> EventEnvelope[FailureClusterDetectedPayload]:
    """The one way to build a failure-cluster event: snapshot_hash and idempotency_key computed.

    The hash is taken over exactly the JSON the payload is written as, so the event decodes.
    Raises ``pydantic.ValidationError`` when a field breaks its bound.
    """
    draft = FailureClusterDetectedPayload(
        cluster_id=cluster_id,
        snapshot_hash=_PLACEHOLDER_HASH,
        rule_id=rule_id,
        workspace_id=workspace_id,
        severity=severity,
        failure_count=failure_count,
        first_observed_at=first_observed_at,
        last_observed_at=last_observed_at,
        evidence_bundle=tuple(evidence_bundle),
        suggested_rule_stub=suggested_rule_stub,
    )
    wire = draft.model_dump(mode="json")
    wire["snapshot_hash"] = snapshot_hash(wire)
    payload = FailureClusterDetectedPayload.model_validate(wire)
    return FAILURE_CLUSTER_SPEC.envelope(
        payload,
        event_id=event_id,
        occurred_at=occurred_at,
        correlation_id=correlation_id,
        causation_id=causation_id,
    )


def snapshot_hash_of_json(data: bytes) -> str:
    """The snapshot_hash of a failure-cluster payload given as JSON text (``spectral contracts
    hash``), refusing a payload the contract refuses.

    The payload is validated as a consumer would (every field's rule, U+0000, integers only,
    nesting); its ``snapshot_hash`` may be missing or anything (it is what is being computed).
    Raises :class:`DecodeError` with ``too_large``, ``not_json``, ``not_an_object`` or
    ``invalid_payload`` (every problem found, in the detail).
    """
    value = parse_json_object(data)
    problems: list[str] = []
    candidate = {**value, "snapshot_hash": _PLACEHOLDER_HASH}
    try:
        FailureClusterDetectedPayload.__pydantic_validator__.validate_python(candidate)
    except ValidationError as exc:
        problems.extend(describe_validation_errors(exc, "payload"))
    nul = find_nul(data, value)
    if nul is not None:
        problems.append(f"{nul.replace('$', 'payload', 1)}: a string holds U+0000")
    try:
        digest = snapshot_hash(value)
    except CanonicalizationError as exc:
        problems.append(str(exc).replace("$", "payload", 1))
    if problems:
        raise DecodeError(DecodeReason.INVALID_PAYLOAD, "; ".join(problems))
    return digest
