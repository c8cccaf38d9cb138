"""Invariant 9: the published JSON Schemas and the consumer agree on every input.

Hypothesis builds valid records of every type and mutates them (values replaced by hostile
ones — U+0000, other UUID spellings, near-valid timestamps, big and fractional numbers, long
strings, nested containers —, members deleted, unknown members added), then repairs what only a
producer computes (snapshot_hash by the independent oracle, idempotency_key by the spec's rule).
For every record:

    consumer accepts  <=>  the JSON Schema accepts  and  no rule of the spec's table
                            "Rules JSON Schema cannot express" is broken,

and when the schema accepts what the consumer refuses, the consumer's reason is the one the
spec's table gives for the broken rule. The rules are checked here independently of
``contracts`` (regular expressions and ``datetime`` on the parsed JSON).
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema_rs
import rfc8785
import xxhash
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from contracts import DecodeError, EventEnvelope
from tests.events import decode
from tests.unit.contracts import factories as f
from tests.unit.contracts.test_fields import digit_soup

SCHEMA_DIR = Path(__file__).resolve().parents[3] / "schemas" / "events"
CLUSTERS = "platform.failure_cluster.detected"
TIMESTAMP_FIELDS = frozenset(
    {"occurred_at", "first_observed_at", "last_observed_at", "observed_at", "not_before"}
)
UUID_FIELDS = frozenset(
    {
        "event_id",
        "correlation_id",
        "causation_id",
        "cluster_id",
        "rule_id",
        "workspace_id",
        "thread_id",
        "parent_thread_id",
        "work_item_id",
        "entry_id",
    }
)
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
END = datetime(9999, 1, 1, tzinfo=UTC)
_OFFSET_FORM = re.compile(r"(.*[Tt]\d\d:\d\d:\d\d)(\.\d+)?([Zz]|[+-]\d\d:\d\d)")

Path_ = tuple[str | int, ...]


@cache
def validator(event_type: str) -> Any:
    schema = json.loads((SCHEMA_DIR / f"{event_type}.v1.json").read_text("utf-8"))
    return jsonschema_rs.validator_for(schema)


# ---- hostile values ---------------------------------------------------------------------------

CHARS = st.characters(codec="utf-8")  # U+0000 included on purpose
uuid_spellings = st.uuids().flatmap(
    lambda u: st.sampled_from(
        [str(u), str(u).upper(), u.hex, f"{{{u}}}", f"urn:uuid:{u}", str(u)[:35], str(u) + "0"]
    )
)
long_text = st.builds(
    lambda char, n: char * n,
    st.sampled_from(["x", "\u00e9", "\U0001f600", "\x00"]),
    st.sampled_from([0, 1, 255, 256, 257, 1999, 2000, 2001, 10_000, 10_001]),
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.integers(-3, 3)
    | st.integers(-(10**9), 10**9).map(lambda n: n + 0.5)
    | st.sampled_from([0.5, -1.25, 1e-7, 1.5e300])
    | st.text(CHARS, max_size=12)
    | st.sampled_from(["low", "medium", "high", "applied", "response", "", "0" * 32])
    | uuid_spellings
    | digit_soup
    | long_text
)
keys = st.text(CHARS, min_size=1, max_size=6)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
    max_leaves=6,
)


def paths(value: Any, path: Path_ = ()) -> list[Path_]:
    """Every member and item path inside ``value`` (not the root)."""
    out: list[Path_] = []
    if isinstance(value, dict):
        for key, item in value.items():
            out.append((*path, key))
            out.extend(paths(item, (*path, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out.append((*path, index))
            out.extend(paths(item, (*path, index)))
    return out


def parent_of(obj: Any, path: Path_) -> Any:
    for part in path[:-1]:
        obj = obj[part]
    return obj


@st.composite
def mutated_records(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    event: EventEnvelope[Any] = draw(f.ANY_EVENT)
    obj = f.wire(event)
    for _ in range(draw(st.integers(0, 3))):
        candidates = paths(obj)
        path = draw(st.sampled_from(candidates))
        parent = parent_of(obj, path)
        action = draw(st.sampled_from(["replace", "replace", "delete", "add", "swap"]))
        last = path[-1]
        payload = obj.get("payload")
        if action == "swap" and isinstance(payload, dict) and "first_observed_at" in payload:
            first, last_seen = payload.get("first_observed_at"), payload.get("last_observed_at")
            payload["first_observed_at"], payload["last_observed_at"] = last_seen, first
        elif action == "delete" and isinstance(parent, dict):
            del parent[last]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(keys)] = draw(values)
        elif isinstance(last, str) and last in TIMESTAMP_FIELDS and draw(st.booleans()):
            parent[last] = draw(digit_soup)
        elif isinstance(last, str) and last in UUID_FIELDS and draw(st.booleans()):
            parent[last] = draw(uuid_spellings)
        else:
            parent[last] = draw(values)
    repair(obj)
    return event.event_type, obj


def repair(obj: dict[str, Any]) -> None:
    """What a producer computes: snapshot_hash (oracle) and idempotency_key (the spec's rule)."""
    payload = obj.get("payload")
    if not isinstance(payload, dict):
        return
    if obj.get("event_type") == CLUSTERS:
        body = {k: v for k, v in payload.items() if k not in {"cluster_id", "snapshot_hash"}}
        # no hash for a float or a huge integer, which the schema refuses too
        with contextlib.suppress(rfc8785.CanonicalizationError, RecursionError):
            payload["snapshot_hash"] = xxhash.xxh3_128_hexdigest(rfc8785.dumps(body))
    key = spec_key(str(obj.get("event_type")), payload)
    if key is not None:
        obj["idempotency_key"] = key


def spec_key(event_type: str, payload: dict[str, Any]) -> str | None:
    """Section 3 of the spec, from the payload as written."""
    fields = {
        CLUSTERS: ("cluster_id", "snapshot_hash"),
        "work.thread.opened": ("thread_id",),
        "work.item.enqueued": ("work_item_id", "attempt"),
        "work.item.state_changed": ("work_item_id", "status", "attempt"),
        "work.ledger.entry_appended": ("entry_id",),
    }.get(event_type)
    if fields is None or not all(type(payload.get(name)) in (str, int) for name in fields):
        return None
    return ":".join(str(payload[name]) for name in fields)


# ---- the rules JSON Schema cannot express, checked independently -----------------------------


def broken_rules(obj: dict[str, Any]) -> set[str]:
    """The reasons of the spec's table rules ``obj`` (already schema-valid) breaks."""
    broken: set[str] = set()
    payload = obj["payload"]
    for path, text in timestamp_texts(obj):
        instant = read_instant(text)
        if not EARLIEST <= instant < END:
            broken.add("invalid_payload" if path[0] == "payload" else "invalid_envelope")
    if obj["event_type"] == CLUSTERS:
        first = read_instant(payload["first_observed_at"]).replace(tzinfo=UTC)
        last = read_instant(payload["last_observed_at"]).replace(tzinfo=UTC)
        if first > last:
            broken.add("invalid_payload")
    return broken


def timestamp_texts(obj: dict[str, Any]) -> list[tuple[Path_, str]]:
    out: list[tuple[Path_, str]] = [(("occurred_at",), obj["occurred_at"])]
    payload = obj["payload"]
    out.extend(
        (("payload", name), payload[name])
        for name in ("first_observed_at", "last_observed_at", "not_before")
        if name in payload
    )
    for index, item in enumerate(payload.get("evidence_bundle", ())):
        out.append((("payload", "evidence_bundle", index), item["observed_at"]))
    return out


def read_instant(text: str) -> datetime:
    """The UTC instant of schema-valid text, microseconds truncated (datetime, independently)."""
    match = _OFFSET_FORM.fullmatch(text)
    assert match is not None
    head, fraction, offset = match.groups()
    micro = ((fraction or ".")[1:] + "000000")[:6]
    zone = "+00:00" if offset in "Zz" else offset
    local = datetime.fromisoformat(f"{head.upper()}.{micro}{zone}")
    try:
        return local.astimezone(UTC)
    except OverflowError:  # beyond datetime's range once converted: out of the bound anyway
        return END


# ---- the property ---------------------------------------------------------------------------


def consumer_verdict(topic: str, text: bytes) -> str:
    try:
        envelope = decode(text)
    except DecodeError as exc:
        return exc.reason.value
    return "valid" if envelope.event_type == topic else "unexpected_event_type"


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_records())
def test_schema_and_consumer_agree_on_every_generated_record(
    record: tuple[str, dict[str, Any]],
) -> None:
    topic, obj = record
    text = json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass")
    verdict = consumer_verdict(topic, text)
    schema_valid = validator(topic).is_valid(copy.deepcopy(obj))
    event(f"schema {'accepts' if schema_valid else 'refuses'}, consumer: {verdict}")
    if not schema_valid:
        assert verdict != "valid", f"the schema refuses what the consumer accepts: {text[:400]!r}"
        return
    broken = broken_rules(obj)
    if not broken:
        assert verdict == "valid", f"the consumer refuses ({verdict}) a schema-valid record"
    else:
        assert verdict in broken, f"{verdict} is not the reason of a broken rule {broken}"


@given(f.ANY_EVENT)
def test_every_valid_event_is_valid_for_its_schema(event: EventEnvelope[Any]) -> None:
    assert validator(event.event_type).is_valid(f.wire(event))
