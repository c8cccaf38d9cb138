"""Cross-language vectors for whole records and timestamps, with hand-declared verdicts.

Every case below is a Kafka record (key and value) written by hand from the spec, with the
verdict the spec gives it: ``valid`` or the refusal reason, and what a JSON Schema validator
says of the value alone (``schema``: ``valid``, ``invalid``, or ``n/a`` when the value is not
JSON at all). Snapshot hashes are computed by the independent oracle (``rfc8785`` + ``xxhash``),
never by ``contracts``; the tests compare ``contracts`` and the published JSON Schemas with
these verdicts (tests/unit/contracts/test_envelope_vectors.py).

Regenerate after adding a case: ``.venv/bin/python -m tests.unit.contracts.envelope_vectors``.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import rfc8785
import xxhash

from tests.unit.contracts import vectors
from tests.unit.contracts.vectors import VECTOR_DIR, render

ENVELOPES_FILE: Final = VECTOR_DIR / "envelopes.json"
TIMESTAMPS_FILE: Final = VECTOR_DIR / "timestamps.json"

LIMIT: Final = 1024 * 1024
MAX_SAFE: Final = 2**53 - 1
CLUSTER: Final = "6f1c2b1e-4d0a-4c59-9a57-1f0e9f3b7a10"
THREAD: Final = "a1b2c3d4-0000-4000-8000-000000000001"
ITEM: Final = "a1b2c3d4-0000-4000-8000-000000000002"
ENTRY: Final = "a1b2c3d4-0000-4000-8000-000000000003"
CLUSTERS: Final = "platform.failure_cluster.detected"

Obj = dict[str, Any]


def oracle_hash(payload: Obj) -> str:
    """The oracle's hash; zeros for a payload that has none (a float, a huge integer): such a
    record is refused before its hash is compared."""
    body = {k: v for k, v in payload.items() if k not in {"cluster_id", "snapshot_hash"}}
    try:
        return xxhash.xxh3_128_hexdigest(rfc8785.dumps(body))
    except (rfc8785.FloatDomainError, rfc8785.IntegerDomainError, RecursionError):
        return "0" * 32


def cluster_payload() -> Obj:
    payload = vectors.snapshot()
    payload["evidence_bundle"] = payload["evidence_bundle"][:1]
    return payload


def envelope(event_type: str, payload: Obj, idempotency_key: str) -> Obj:
    return {
        "event_id": "3da440f0-fb42-4b25-b9cb-e49a1fc7e851",
        "event_type": event_type,
        "schema_version": 1,
        "source": "platform" if event_type == CLUSTERS else "work",
        "target": "platform" if event_type == CLUSTERS else "work",
        "occurred_at": "2026-11-21T12:30:01.000000Z",
        "idempotency_key": idempotency_key,
        "correlation_id": None,
        "causation_id": None,
        "payload": payload,
    }


def cluster(edit: Callable[[Obj], None] | None = None, *, rehash: bool = True) -> Obj:
    """A cluster envelope; ``edit`` changes its payload (or the envelope: it gets both via the
    envelope's ``payload``), then the hash and key are recomputed unless ``rehash`` is false."""
    payload = cluster_payload()
    payload["snapshot_hash"] = oracle_hash(payload)
    obj = envelope(CLUSTERS, payload, f"{CLUSTER}:{payload['snapshot_hash']}")
    if edit is not None:
        edit(obj)
    if rehash and isinstance(obj.get("payload"), dict):
        wire = obj["payload"]
        wire["snapshot_hash"] = oracle_hash(wire)
        obj["idempotency_key"] = f"{wire.get('cluster_id')}:{wire['snapshot_hash']}"
    return obj


def work(event_type: str) -> tuple[Obj, str]:
    """A valid work envelope and its record key."""
    if event_type == "work.thread.opened":
        payload: Obj = {
            "thread_id": THREAD,
            "kind": "story_generate_epic",
            "space_type": "project",
            "space_id": "acme",
            "target_ref": "backlog-1#E1",
            "parent_thread_id": None,
            "idempotency_key": "generate_stories/acme/backlog-1/E1",
        }
        return envelope(event_type, payload, THREAD), THREAD
    if event_type == "work.item.enqueued":
        payload = {
            "work_item_id": ITEM,
            "thread_id": THREAD,
            "sequence": 0,
            "attempt": 1,
            "lock_scope": "epic:backlog-1/E1",
            "not_before": "2026-11-21T12:30:00.000000Z",
            "kind": "story_generate_epic",
            "target_ref": "backlog-1#E1",
            "input": {"temperature": 0.2, "big": 18446744073709551616, "tags": ["a", None]},
        }
        return envelope(event_type, payload, f"{ITEM}:1"), "epic:backlog-1/E1"
    if event_type == "work.item.state_changed":
        payload = {
            "work_item_id": ITEM,
            "thread_id": THREAD,
            "lock_scope": "epic:backlog-1/E1",
            "status": "dead_letter",
            "attempt": 3,
            "error_message": "model answer was not JSON",
        }
        return envelope(event_type, payload, f"{ITEM}:dead_letter:3"), "epic:backlog-1/E1"
    payload = {
        "entry_id": ENTRY,
        "thread_id": THREAD,
        "work_item_id": ITEM,
        "entry_type": "response",
        "hash": "0123456789abcdef0123456789abcdef",
    }
    return envelope(event_type, payload, ENTRY), THREAD


@dataclass(frozen=True)
class Case:
    name: str
    value: Obj | str | bytes | None
    """The record value: an object (written as JSON), text, bytes (not UTF-8), or None (a
    tombstone: a record without a value)."""
    expect: str = "valid"
    schema: str | None = None
    """What a JSON Schema validator says of the value; default: valid iff expect is valid."""
    key: str | bytes | None = CLUSTER
    """The record key: text (its UTF-8 bytes), bytes (not UTF-8), or None (no key)."""
    rule: str = ""
    """For refusals JSON Schema cannot express: the spec's rule, in words."""
    topic: str = CLUSTERS
    """The event type whose topic the record is on (and whose JSON Schema applies)."""
    extra: dict[str, Any] = field(default_factory=dict)


def _each(*edits: Callable[[Obj], None]) -> Callable[[Obj], None]:
    """One edit applying ``edits`` in order."""

    def edit(obj: Obj) -> None:
        for one in edits:
            one(obj)

    return edit


def _set(path: str, value: Any = None) -> Callable[[Obj], None]:
    """An edit setting ``path`` (dot-separated, integers index lists) of the envelope."""

    def edit(obj: Obj) -> None:
        *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        node: Any = obj
        for part in parents:
            node = node[part]
        node[last] = value

    return edit


def _drop(path: str) -> Callable[[Obj], None]:
    def edit(obj: Obj) -> None:
        *parents, last = path.split(".")
        node: Any = obj
        for part in parents:
            node = node[part]
        del node[last]

    return edit


def _unknown_fields_everywhere(obj: Obj) -> None:
    obj["trace"] = {"hops": [1, 2.5, "x"], "sampled": True}  # floats: outside the hashed payload
    obj["payload"]["blast_radius"] = {"accounts": 3, "regions": ["eu"]}
    obj["payload"]["evidence_bundle"][0]["resource"] = "arn:aws:s3:::acme"


def _deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


ASTRAL = "\U0001f600"  # one code point, four UTF-8 bytes, two UTF-16 units

# The rules JSON Schema cannot express, word for word as the spec's table states them.
R_INTEGER: Final = "an integer is written without a fraction or an exponent"
R_INSTANT: Final = (
    "a timestamp's instant, in UTC, lies from 1970-01-01T00:00:00Z up to 9999-01-01T00:00:00Z"
)
R_HASHED_DEPTH: Final = "a hashed payload nests at most 64 levels deep"
R_DEPTH: Final = "a record nests at most 1,024 levels deep"
R_ORDER: Final = "first_observed_at <= last_observed_at, compared after truncation to microseconds"
R_HASH: Final = "snapshot_hash is the hash of the payload as written"
R_KEY: Final = "idempotency_key follows the event type's key rule"
R_RECORD_KEY: Final = "the Kafka record key is the event type's record key, in UTF-8"
R_SIZE: Final = "a record value is at most 1,048,576 bytes"
R_LENGTH: Final = "lengths count Unicode code points"
RULES: Final = (
    R_INTEGER,
    R_INSTANT,
    R_HASHED_DEPTH,
    R_DEPTH,
    R_ORDER,
    R_HASH,
    R_KEY,
    R_RECORD_KEY,
    R_SIZE,
    R_LENGTH,
)


def cases() -> list[Case]:  # noqa: PLR0915 - one flat, readable list of cases
    out: list[Case] = []
    add = out.append

    # ---- valid records ------------------------------------------------------------------
    add(Case("cluster_minimal", cluster()))
    add(Case("cluster_without_optional_tracing_ids", cluster(_drop("correlation_id"))))
    add(
        Case(
            "cluster_with_tracing_ids",
            cluster(_set("correlation_id", "0f0e0d0c-0b0a-4908-8706-050403020100")),
        )
    )
    add(
        Case(
            "cluster_with_unknown_fields_everywhere",
            cluster(_unknown_fields_everywhere),
        )
    )
    add(
        Case(
            "cluster_timestamps_with_offsets_lowercase_and_nine_digits",
            cluster(
                lambda o: o["payload"].update(
                    first_observed_at="2026-11-21t15:30:00.123456789+05:30",
                    last_observed_at="2026-11-21T12:30:00.25z",
                )
            ),
        )
    )
    add(
        Case(
            "cluster_timestamps_at_the_bounds",
            cluster(
                lambda o: o["payload"].update(
                    first_observed_at="1970-01-01T00:00:00Z",
                    last_observed_at="9998-12-31T23:59:59.999999Z",
                )
            ),
        )
    )
    add(
        Case(
            "cluster_first_equals_last_after_truncation",
            cluster(
                lambda o: o["payload"].update(
                    first_observed_at="2026-11-21T12:30:00.2500009Z",
                    last_observed_at="2026-11-21T12:30:00.250000Z",
                )
            ),
            rule=R_ORDER,
        )
    )
    add(Case("cluster_failure_count_max", cluster(_set("payload.failure_count", MAX_SAFE))))
    add(
        Case(
            "cluster_edge_lengths_in_code_points",
            cluster(
                lambda o: o["payload"].update(
                    evidence_bundle=[
                        {
                            "failure_id": ASTRAL * 256,
                            "observed_at": "2026-11-21T10:00:00Z",
                            "summary": ASTRAL * 2000,
                        }
                    ],
                    suggested_rule_stub="x" * 20000,
                )
            ),
            rule=R_LENGTH,
        )
    )
    add(
        Case(
            "cluster_ten_evidence_items",
            cluster(
                lambda o: o["payload"].update(evidence_bundle=o["payload"]["evidence_bundle"] * 10)
            ),
        )
    )
    add(
        Case(
            "cluster_escaped_backslash_before_u0000_is_not_nul",
            cluster(_set("payload.evidence_bundle.0.summary", "C:\\u0000 is text")),
        )
    )
    add(
        Case(
            "cluster_empty_evidence_and_empty_summary",
            cluster(_set("payload.evidence_bundle", [])),
        )
    )
    add(Case("cluster_unknown_field_nested_64_levels", cluster(_set("payload.extra", _deep(63)))))
    # schema_version is informational: a newer version with a field version 1 lacks decodes.
    add(
        Case(
            "schema_version_2_with_a_new_payload_field",
            cluster(_each(_set("schema_version", 2), _set("payload.blast_radius", 4))),
        )
    )
    for event_type in (
        "work.thread.opened",
        "work.item.enqueued",
        "work.item.state_changed",
        "work.ledger.entry_appended",
    ):
        obj, key = work(event_type)
        add(Case(event_type.replace(".", "_"), obj, key=key, topic=event_type))

    # ---- not JSON, not an object ---------------------------------------------------------
    minimal = json.dumps(cluster())
    add(Case("truncated", minimal[:-1], "not_json", "n/a"))
    add(Case("byte_order_mark", "\ufeff" + minimal, "not_json", "n/a"))
    add(Case("invalid_utf8", minimal.encode()[:-1] + b"\xff}", "not_json", "n/a"))
    add(Case("lone_surrogate_escape", minimal[:-1] + ', "x": "\\ud800"}', "not_json", "n/a"))
    add(Case("nan", minimal[:-1] + ', "x": NaN}', "not_json", "n/a"))
    add(Case("number_overflowing_a_double", minimal[:-1] + ', "x": 1e400}', "not_json", "n/a"))
    add(Case("raw_control_character", minimal[:-1] + ', "x": "a\tb"}', "not_json", "n/a"))
    add(Case("trailing_content", minimal + " {}", "not_json", "n/a"))
    add(Case("tombstone_null_value", None, "not_json", "n/a"))
    add(Case("empty_value", "", "not_json", "n/a"))
    # UTF-16 and UTF-32 text is not UTF-8, even where a parser could detect the encoding.
    add(Case("utf16le_text", minimal.encode("utf-16-le"), "not_json", "n/a"))
    add(Case("utf16_text_with_byte_order_mark", minimal.encode("utf-16"), "not_json", "n/a"))
    add(Case("utf32be_text", minimal.encode("utf-32-be"), "not_json", "n/a"))
    add(
        Case(
            "nesting_deeper_than_1024",
            minimal[:-1] + ', "x": ' + "[" * 1024 + "]" * 1024 + "}",
            "not_json",
            "n/a",
            rule=R_DEPTH,
        )
    )
    # Outside the (hashed) payload a record may nest 1,024 levels, the envelope being level 1.
    add(
        Case(
            "nesting_exactly_1024",
            minimal[:-1] + ', "x": ' + "[" * 1023 + "]" * 1023 + "}",
            rule=R_DEPTH,
        )
    )
    add(Case("top_level_array", "[]", "not_an_object", "invalid"))

    # ---- the envelope ------------------------------------------------------------------------
    add(Case("event_type_missing", cluster(_drop("event_type")), "invalid_envelope", "invalid"))
    add(
        Case(
            "event_type_not_a_string", cluster(_set("event_type", 7)), "invalid_envelope", "invalid"
        )
    )
    add(
        Case(
            "event_type_unknown",
            cluster(_set("event_type", "platform.other")),
            "unknown_event_type",
            "invalid",
        )
    )
    add(Case("event_id_missing", cluster(_drop("event_id")), "invalid_envelope"))
    add(
        Case(
            "event_id_uppercase",
            cluster(_set("event_id", "3DA440F0-FB42-4B25-B9CB-E49A1FC7E851")),
            "invalid_envelope",
        )
    )
    add(
        Case(
            "event_id_without_hyphens",
            cluster(_set("event_id", "3da440f0fb424b25b9cbe49a1fc7e851")),
            "invalid_envelope",
        )
    )
    add(Case("schema_version_zero", cluster(_set("schema_version", 0)), "invalid_envelope"))
    add(
        Case(
            "schema_version_written_1_0",
            minimal.replace('"schema_version": 1', '"schema_version": 1.0'),
            "invalid_envelope",
            "valid",
            rule=R_INTEGER,
        )
    )
    add(
        Case("schema_version_true", cluster(_set("schema_version", value=True)), "invalid_envelope")
    )
    add(Case("source_empty", cluster(_set("source", "")), "invalid_envelope"))
    add(
        Case(
            "occurred_at_naive",
            cluster(_set("occurred_at", "2026-11-21T12:30:01")),
            "invalid_envelope",
        )
    )
    add(Case("occurred_at_unix_time", cluster(_set("occurred_at", 1763728201)), "invalid_envelope"))
    add(
        Case(
            "occurred_at_before_1970",
            cluster(_set("occurred_at", "1969-12-31T23:59:59Z")),
            "invalid_envelope",
        )
    )
    add(
        Case(
            "occurred_at_year_9999",
            cluster(_set("occurred_at", "9999-12-31T23:59:59.999999Z")),
            "invalid_envelope",
        )
    )
    add(
        Case(
            "occurred_at_offset_moves_it_before_1970",
            cluster(_set("occurred_at", "1970-01-01T00:30:00+01:00")),
            "invalid_envelope",
            "valid",
            rule=R_INSTANT,
        )
    )
    add(
        Case(
            "occurred_at_leap_second",
            cluster(_set("occurred_at", "2026-12-31T23:59:60Z")),
            "invalid_envelope",
        )
    )
    add(
        Case(
            "occurred_at_offset_minutes_60",
            cluster(_set("occurred_at", "2026-11-21T12:30:01+05:60")),
            "invalid_envelope",
        )
    )
    add(Case("nul_in_source", cluster(_set("source", "plat\u0000form")), "invalid_envelope"))
    add(
        Case(
            "nul_in_an_unknown_envelope_member_name",
            cluster(_set("x\u0000", 1)),
            "invalid_envelope",
        )
    )
    add(
        Case(
            "nul_deep_in_an_unknown_envelope_field",
            cluster(_set("trace", [{"a": ["\u0000"]}])),
            "invalid_envelope",
        )
    )
    add(Case("payload_missing", cluster(_drop("payload"), rehash=False), "invalid_envelope"))
    # A payload that is not an object breaks the envelope's rule for `payload` (an object), as a
    # missing one does; the payload's own rules apply to the members of an object.
    for name, payload in (("an_array", [1]), ("a_string", "x"), ("null", None), ("a_number", 5)):
        add(
            Case(
                f"payload_{name}",
                cluster(_set("payload", payload), rehash=False),
                "invalid_envelope",
            )
        )
    # The type is looked up before the other envelope fields are checked.
    add(
        Case(
            "event_type_unknown_and_event_id_broken",
            cluster(_each(_set("event_type", "platform.other"), _set("event_id", "not-a-uuid"))),
            "unknown_event_type",
        )
    )
    add(
        Case(
            "event_type_unknown_and_payload_missing",
            cluster(_each(_set("event_type", "platform.other"), _drop("payload")), rehash=False),
            "unknown_event_type",
        )
    )
    # An envelope error wins over a payload error, U+0000 outside the payload included.
    add(
        Case(
            "nul_in_source_and_an_invalid_payload",
            cluster(_each(_set("source", "plat\u0000form"), _set("payload.severity", "none"))),
            "invalid_envelope",
        )
    )
    add(
        Case(
            "nul_in_an_unknown_envelope_field_and_in_the_payload",
            cluster(
                _each(_set("trace", "\u0000"), _set("payload.evidence_bundle.0.summary", "\u0000"))
            ),
            "invalid_envelope",
        )
    )

    # ---- the payload -------------------------------------------------------------------------
    add(
        Case(
            "severity_unknown", cluster(_set("payload.severity", "catastrophic")), "invalid_payload"
        )
    )
    add(Case("failure_count_zero", cluster(_set("payload.failure_count", 0)), "invalid_payload"))
    add(
        Case(
            "failure_count_above_2_53_minus_1",
            cluster(_set("payload.failure_count", MAX_SAFE + 1)),
            "invalid_payload",
        )
    )
    add(
        Case(
            "failure_count_written_5_0",
            minimal.replace('"failure_count": 3', '"failure_count": 3.0'),
            "invalid_payload",
            "valid",
            rule=R_INTEGER,
        )
    )
    add(
        Case(
            "float_in_an_unknown_payload_field",
            cluster(_set("payload.score", 0.5)),
            "invalid_payload",
        )
    )
    add(
        Case(
            "float_in_an_unknown_evidence_field",
            cluster(_set("payload.evidence_bundle.0.score", 1.5)),
            "invalid_payload",
        )
    )
    add(
        Case(
            "unknown_payload_field_nested_65_levels",
            cluster(_set("payload.extra", _deep(64))),
            "invalid_payload",
            "valid",
            rule=R_HASHED_DEPTH,
        )
    )
    add(
        Case(
            "first_observed_after_last",
            cluster(_set("payload.first_observed_at", "2026-11-21T12:30:00.250001Z")),
            "invalid_payload",
            "valid",
            rule=R_ORDER,
        )
    )
    add(
        Case(
            "eleven_evidence_items",
            cluster(
                lambda o: o["payload"].update(evidence_bundle=o["payload"]["evidence_bundle"] * 11)
            ),
            "invalid_payload",
        )
    )
    add(
        Case(
            "summary_2001_code_points",
            cluster(_set("payload.evidence_bundle.0.summary", ASTRAL * 2001)),
            "invalid_payload",
        )
    )
    add(
        Case(
            "rule_stub_20001_characters",
            cluster(_set("payload.suggested_rule_stub", "x" * 20001)),
            "invalid_payload",
        )
    )
    add(
        Case(
            "failure_id_empty",
            cluster(_set("payload.evidence_bundle.0.failure_id", "")),
            "invalid_payload",
        )
    )
    add(
        Case(
            "nul_in_summary",
            cluster(_set("payload.evidence_bundle.0.summary", "stack\u0000trace")),
            "invalid_payload",
        )
    )
    add(
        Case(
            "nul_in_rule_stub",
            cluster(_set("payload.suggested_rule_stub", "\u0000")),
            "invalid_payload",
        )
    )
    add(
        Case(
            "cluster_id_uppercase",
            cluster(_set("payload.cluster_id", CLUSTER.upper())),
            "invalid_payload",
            key=CLUSTER.upper(),
        )
    )
    add(
        Case(
            "rule_id_braced",
            cluster(_set("payload.rule_id", "{0b7e7f4e-6d2f-4f43-8b1f-3c1a2e9d5b77}")),
            "invalid_payload",
        )
    )
    add(
        Case(
            "observed_at_february_29_2026",
            cluster(_set("payload.evidence_bundle.0.observed_at", "2026-02-29T10:00:00Z")),
            "invalid_payload",
        )
    )
    add(
        Case(
            "snapshot_hash_uppercase",
            cluster(
                lambda o: o["payload"].update(snapshot_hash=oracle_hash(o["payload"]).upper()),
                rehash=False,
            ),
            "invalid_payload",
        )
    )

    # ---- hash and keys -------------------------------------------------------------------------
    add(
        Case(
            "hash_mismatch",
            cluster(_set("payload.failure_count", 4), rehash=False),
            "hash_mismatch",
            "valid",
            rule=R_HASH,
        )
    )
    add(
        Case(
            "idempotency_key_mismatch",
            cluster(lambda o: o.update(idempotency_key=CLUSTER), rehash=False),
            "key_mismatch",
            "valid",
            rule=R_KEY,
        )
    )
    add(
        Case(
            "record_key_null",
            cluster(),
            "record_key_mismatch",
            "valid",
            key=None,
            rule=R_RECORD_KEY,
        )
    )
    add(
        Case(
            "record_key_empty",
            cluster(),
            "record_key_mismatch",
            "valid",
            key="",
            rule=R_RECORD_KEY,
        )
    )
    add(
        Case(
            "record_key_uppercase",
            cluster(),
            "record_key_mismatch",
            "valid",
            key=CLUSTER.upper(),
            rule=R_RECORD_KEY,
        )
    )
    add(
        Case(
            "record_key_not_utf8",
            cluster(),
            "record_key_mismatch",
            "valid",
            key=b"\xff" + CLUSTER.encode()[1:],
            rule=R_RECORD_KEY,
        )
    )
    add(
        Case(
            "record_key_in_latin1_not_utf8",
            cluster(),
            "record_key_mismatch",
            "valid",
            key=CLUSTER.encode() + "\u00e9".encode("latin-1"),
            rule=R_RECORD_KEY,
        )
    )
    # A valid record of another type on this topic (keyed right for its own type).
    thread, thread_key = work("work.thread.opened")
    add(
        Case(
            "work_thread_opened_on_the_cluster_topic",
            thread,
            "unexpected_event_type",
            key=thread_key,
        )
    )
    enqueued, _ = work("work.item.enqueued")
    add(
        Case(
            "work_item_enqueued_keyed_by_item",
            enqueued,
            "record_key_mismatch",
            "valid",
            key=ITEM,
            topic="work.item.enqueued",
            rule=R_RECORD_KEY,
        )
    )
    state, state_key = work("work.item.state_changed")
    bad_state = copy.deepcopy(state)
    bad_state["payload"]["status"] = "done"
    add(
        Case(
            "work_item_state_changed_unknown_status",
            bad_state,
            "invalid_payload",
            key=state_key,
            topic="work.item.state_changed",
        )
    )
    return out


def size_cases() -> list[dict[str, Any]]:
    """Records at the size limit: value = prefix + filler * n + suffix, total_bytes long."""
    text = json.dumps(cluster())
    prefix, suffix = text[:-1], "}"
    return [
        {
            "name": name,
            "topic_event_type": CLUSTERS,
            "key": CLUSTER,
            "value_prefix": prefix,
            "filler": " ",
            "value_suffix": suffix,
            "total_bytes": total,
            "expect": expect,
            "schema": "valid",
            "rule": R_SIZE,
        }
        for name, total, expect in (
            ("exactly_1_MiB", LIMIT, "valid"),
            ("one_byte_over_1_MiB", LIMIT + 1, "too_large"),
        )
    ]


def _entry(case: Case) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": case.name, "topic_event_type": case.topic}
    if isinstance(case.key, bytes):
        entry["key_base64"] = base64.b64encode(case.key).decode()
    else:
        entry["key"] = case.key
    if isinstance(case.value, bytes):
        entry["value_base64"] = base64.b64encode(case.value).decode()
    elif isinstance(case.value, str) or case.value is None:
        entry["value"] = case.value
    else:
        entry["value"] = json.dumps(case.value, ensure_ascii=False)
    entry["expect"] = case.expect
    entry["schema"] = case.schema or ("valid" if case.expect == "valid" else "invalid")
    if case.rule:
        entry["rule"] = case.rule
    if case.expect == "valid" and isinstance(case.value, dict):
        entry["idempotency_key"] = case.value["idempotency_key"]
    return entry


TIMESTAMP_CASES: Final[list[tuple[str, str | None]]] = [
    ("2026-11-21T10:00:00.123456Z", "2026-11-21T10:00:00.123456Z"),
    ("2026-11-21T10:00:00Z", "2026-11-21T10:00:00.000000Z"),
    ("2026-11-21t10:00:00z", "2026-11-21T10:00:00.000000Z"),
    ("2026-11-21T10:00:00.5Z", "2026-11-21T10:00:00.500000Z"),
    ("2026-11-21T10:00:00.1234569999Z", "2026-11-21T10:00:00.123456Z"),
    ("2026-11-21T12:30:00+02:30", "2026-11-21T10:00:00.000000Z"),
    ("2026-11-21T05:00:00-05:00", "2026-11-21T10:00:00.000000Z"),
    ("2026-11-21T10:00:00-00:00", "2026-11-21T10:00:00.000000Z"),
    ("2026-12-31T23:30:00-01:00", "2027-01-01T00:30:00.000000Z"),
    ("2024-02-29T00:00:00+23:59", "2024-02-28T00:01:00.000000Z"),
    ("2000-02-29T00:00:00Z", "2000-02-29T00:00:00.000000Z"),
    ("1970-01-01T00:00:00Z", "1970-01-01T00:00:00.000000Z"),
    ("9998-12-31T23:59:59.9999999Z", "9998-12-31T23:59:59.999999Z"),
    ("1969-12-31T23:59:59.999999Z", None),
    ("1969-12-31T23:30:00-01:00", None),
    ("1970-01-01T00:30:00+01:00", None),
    ("9998-12-31T23:00:00-01:00", None),
    ("9999-01-01T00:00:00Z", None),
    ("0001-01-01T00:00:00Z", None),
    ("2100-02-29T00:00:00Z", None),
    ("2026-02-29T00:00:00Z", None),
    ("2026-04-31T00:00:00Z", None),
    ("2026-13-01T00:00:00Z", None),
    ("2026-11-21T24:00:00Z", None),
    ("2026-11-21T10:60:00Z", None),
    ("2026-12-31T23:59:60Z", None),
    ("2026-11-21T10:00:00+24:00", None),
    ("2026-11-21T10:00:00+05:60", None),
    ("2026-11-21T10:00:00+0100", None),
    ("2026-11-21T10:00:00+01", None),
    ("2026-11-21T10:00:00", None),
    ("2026-11-21T10:00Z", None),
    ("2026-11-21 10:00:00Z", None),
    ("2026-11-21T10:00:00,5Z", None),
    ("2026-11-21T10:00:00.Z", None),
    ("20261121T100000Z", None),
    ("2026-11-21", None),
    ("2026-11-21T10:00:00Z\n", None),
    ("\uff12026-11-21T10:00:00Z", None),
]


def build() -> dict[str, Any]:
    return {
        "records": [_entry(case) for case in cases()],
        "sized_records": size_cases(),
    }


def build_timestamps() -> list[dict[str, Any]]:
    return [
        {"text": text, "valid": utc is not None, **({"utc": utc} if utc else {})}
        for text, utc in TIMESTAMP_CASES
    ]


def main() -> None:
    ENVELOPES_FILE.write_text(render(build()), "utf-8")
    TIMESTAMPS_FILE.write_text(render(build_timestamps()), "utf-8")


if __name__ == "__main__":
    main()
