"""Checked-in JSON Schemas: no drift from the models, and every change additive."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from contracts import (
    breaking_changes,
    envelope_json_schema,
    render_event_schemas,
    schema_violations,
)
from tests.events import EVENTS, spec_for

SCHEMA_DIR = Path(__file__).resolve().parents[3] / "schemas" / "events"


def checked_in() -> dict[str, str]:
    return {path.name: path.read_text("utf-8") for path in sorted(SCHEMA_DIR.glob("*.v*.json"))}


def test_checked_in_schemas_equal_the_models() -> None:
    rendered = render_event_schemas(EVENTS)
    files = checked_in()
    stale = sorted(name for name, text in rendered.items() if files.get(name) != text)
    assert not stale, f"out of date: {stale}; run `spectral contracts export` and commit"


def test_current_models_are_additive_against_every_checked_in_version() -> None:
    violations = schema_violations(render_event_schemas(EVENTS), checked_in())
    assert not violations, "\n".join(violations)


def test_one_file_per_registered_type_and_version() -> None:
    assert set(render_event_schemas(EVENTS)) == {
        "platform.failure_cluster.detected.v1.json",
        "work.item.enqueued.v1.json",
        "work.item.state_changed.v1.json",
        "work.ledger.entry_appended.v1.json",
        "work.thread.opened.v1.json",
    }


def test_rendering_is_deterministic_sorted_and_ends_with_a_newline() -> None:
    first = render_event_schemas(EVENTS)
    assert first == render_event_schemas(EVENTS)
    for text in first.values():
        assert text.endswith("}\n")
        assert (
            text
            == json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        )


def test_the_schema_pins_the_event_type_and_describes_the_timestamp_format() -> None:
    schema = envelope_json_schema(spec_for("platform.failure_cluster.detected"))
    assert schema["properties"]["event_type"]["const"] == "platform.failure_cluster.detected"
    assert schema["additionalProperties"] == {"$ref": "#/$defs/JsonValue"}
    occurred = schema["properties"]["occurred_at"]
    assert occurred["format"] == "date-time"
    assert "YYYY-MM-DDTHH:MM:SS.ffffffZ" in occurred["description"]
    payload = schema["$defs"]["FailureClusterDetectedPayload"]
    assert payload["properties"]["evidence_bundle"]["maxItems"] == 10
    assert payload["properties"]["severity"]["enum"] == ["low", "medium", "high"]
    assert payload["additionalProperties"] == {"$ref": "#/$defs/HashedJsonValue"}


# ---- breaking_changes itself ----------------------------------------------------------------


@pytest.fixture
def base() -> dict[str, Any]:
    return envelope_json_schema(spec_for("platform.failure_cluster.detected"))


def payload_of(schema: dict[str, Any]) -> dict[str, Any]:
    payload: dict[str, Any] = schema["$defs"]["FailureClusterDetectedPayload"]
    return payload


def ref_of(schema: dict[str, Any]) -> dict[str, Any]:
    ref: dict[str, Any] = schema["$defs"]["FailureRef"]
    return ref


def test_identical_schemas_have_no_breaking_change(base: dict[str, Any]) -> None:
    assert breaking_changes(base, copy.deepcopy(base)) == []


def test_a_new_optional_field_is_additive(base: dict[str, Any]) -> None:
    new = copy.deepcopy(base)
    payload_of(new)["properties"]["blast_radius"] = {"type": "integer"}
    ref_of(new)["properties"]["resource"] = {"type": "string"}
    new["properties"]["trace"] = {"type": "string"}
    assert breaking_changes(base, new) == []


def test_descriptions_and_titles_may_change(base: dict[str, Any]) -> None:
    new = copy.deepcopy(base)
    payload_of(new)["properties"]["severity"]["description"] = "changed"
    payload_of(new)["properties"]["severity"]["title"] = "Changed"
    assert breaking_changes(base, new) == []


def test_a_removed_field_is_breaking(base: dict[str, Any]) -> None:
    new = copy.deepcopy(base)
    del ref_of(new)["properties"]["summary"]
    assert breaking_changes(base, new) == [
        "$.payload.evidence_bundle[].summary: removed (or renamed)"
    ]


def test_a_renamed_field_is_breaking(base: dict[str, Any]) -> None:
    new = copy.deepcopy(base)
    props = payload_of(new)["properties"]
    props["count"] = props.pop("failure_count")
    payload_of(new)["required"] = [
        "count" if r == "failure_count" else r for r in payload_of(new)["required"]
    ]
    changes = breaking_changes(base, new)
    assert "$.payload.failure_count: removed (or renamed)" in changes
    assert "$.payload.count: newly required" in changes


@pytest.mark.parametrize(
    ("field", "new_schema"),
    [
        ("failure_count", {"type": "string"}),
        ("failure_count", {"type": "integer", "minimum": 0, "maximum": 9007199254740991}),
        ("severity", {"enum": ["low", "medium", "high", "critical"], "type": "string"}),
        ("cluster_id", {"type": "string"}),
        ("suggested_rule_stub", {"type": "string", "maxLength": 20000}),
        ("evidence_bundle", {"type": "array", "items": {"type": "string"}, "maxItems": 10}),
    ],
)
def test_a_retyped_field_is_breaking(
    base: dict[str, Any], field: str, new_schema: dict[str, Any]
) -> None:
    new = copy.deepcopy(base)
    payload_of(new)["properties"][field] = new_schema
    changes = breaking_changes(base, new)
    assert changes
    assert all(change.startswith(f"$.payload.{field}") for change in changes)


def test_a_newly_required_field_is_breaking(base: dict[str, Any]) -> None:
    new = copy.deepcopy(base)
    new["required"] = [*new["required"], "correlation_id"]
    assert breaking_changes(base, new) == ["$.correlation_id: newly required"]


def test_a_field_no_longer_required_is_breaking(base: dict[str, Any]) -> None:
    new = copy.deepcopy(base)
    payload_of(new)["required"].remove("rule_id")
    assert breaking_changes(base, new) == [
        "$.payload.rule_id: no longer required (readers of the old version need it)"
    ]


def test_refusing_unknown_fields_is_breaking(base: dict[str, Any]) -> None:
    new = copy.deepcopy(base)
    payload_of(new)["additionalProperties"] = False
    assert breaking_changes(base, new)


def test_schema_violations_compare_against_older_versions_too(base: dict[str, Any]) -> None:
    old = copy.deepcopy(base)
    payload_of(old)["properties"]["legacy"] = {"type": "string"}
    text = json.dumps(base)
    violations = schema_violations(
        {"platform.failure_cluster.detected.v2.json": text},
        {
            "platform.failure_cluster.detected.v1.json": json.dumps(old),
            "platform.failure_cluster.detected.v3.json": json.dumps(old),  # newer: ignored
            "work.thread.opened.v1.json": json.dumps(old),  # other type: ignored
        },
    )
    assert violations == [
        (
            "platform.failure_cluster.detected.v2.json vs "
            "platform.failure_cluster.detected.v1.json: $.payload.legacy: removed (or renamed)"
        )
    ]
