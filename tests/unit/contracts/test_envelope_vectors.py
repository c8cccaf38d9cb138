"""The record and timestamp vectors: the consumer's verdicts, the JSON Schemas' verdicts and the
spec's rules all agree with the hand-declared ones.

The consumer's verdict is the consumer engine's decode step's (:class:`RecordDecoder`, as a
deployment reading the vector's topic runs it): decode, record key and topic, so every reason a
vector declares, ``unexpected_event_type`` included, is the one a running consumer gives."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema_rs
import orjson
import pytest

from contracts import format_utc, parse_utc
from contracts.dead_letters import REFUSALS
from spectral.engine.decode import RecordDecoder
from spectral.engine.handler import Delivery
from tests.events import EVENTS
from tests.unit.contracts import envelope_vectors as ev

SCHEMA_DIR = Path(__file__).resolve().parents[3] / "schemas" / "events"
SPEC = (SCHEMA_DIR / "README.md").read_text("utf-8")
VECTORS: dict[str, Any] = json.loads(ev.ENVELOPES_FILE.read_text("utf-8"))
RECORDS: list[dict[str, Any]] = VECTORS["records"]
SIZED: list[dict[str, Any]] = VECTORS["sized_records"]
TIMESTAMPS: list[dict[str, Any]] = json.loads(ev.TIMESTAMPS_FILE.read_text("utf-8"))


def validator(event_type: str) -> Any:
    schema = json.loads((SCHEMA_DIR / f"{event_type}.v1.json").read_text("utf-8"))
    return jsonschema_rs.validator_for(schema)


def value_of(vector: dict[str, Any]) -> bytes | None:
    if "value_base64" in vector:
        return base64.b64decode(str(vector["value_base64"]))
    if "value" in vector:
        text: str | None = vector["value"]
        return None if text is None else text.encode("utf-8")
    filler = vector["total_bytes"] - len(vector["value_prefix"]) - len(vector["value_suffix"])
    text = vector["value_prefix"] + vector["filler"] * filler + vector["value_suffix"]
    return str(text).encode()


def key_of(vector: dict[str, Any]) -> bytes | None:
    if "key_base64" in vector:
        return base64.b64decode(str(vector["key_base64"]))
    key = vector["key"]
    return None if key is None else key.encode("utf-8")


def consumer_verdict(vector: dict[str, Any]) -> str:
    """What a consumer of the vector's topic makes of the record: "valid", or the reason."""
    topic = vector["topic_event_type"]
    decoder = RecordDecoder("vectors", {topic: topic}, EVENTS)
    record = SimpleNamespace(
        topic=topic,
        partition=0,
        offset=0,
        key=key_of(vector),
        value=value_of(vector),
        timestamp=0,
        headers=(),
    )
    decoded = decoder.decode(record)
    if not isinstance(decoded, Delivery):
        assert decoded.value == (record.value or b"")  # the dead letter keeps the bytes
        return decoded.reason
    if "idempotency_key" in vector:
        assert decoded.envelope.idempotency_key == vector["idempotency_key"]
    return "valid"


def test_checked_in_vectors_are_the_generators_output() -> None:
    from tests.unit.contracts.vectors import render  # noqa: PLC0415

    assert ev.ENVELOPES_FILE.read_text("utf-8") == render(ev.build())
    assert ev.TIMESTAMPS_FILE.read_text("utf-8") == render(ev.build_timestamps())


@pytest.mark.parametrize("vector", RECORDS + SIZED, ids=[v["name"] for v in RECORDS + SIZED])
def test_the_consumer_gives_every_record_its_declared_verdict(vector: dict[str, Any]) -> None:
    assert consumer_verdict(vector) == vector["expect"]


@pytest.mark.parametrize("vector", RECORDS + SIZED, ids=[v["name"] for v in RECORDS + SIZED])
def test_the_json_schema_gives_every_record_its_declared_verdict(vector: dict[str, Any]) -> None:
    if vector["schema"] == "n/a":  # not JSON: no schema can be asked
        return
    value = value_of(vector)
    assert value is not None
    instance = orjson.loads(value)  # json.loads stops at ~1,000 levels; records nest 1,024
    valid = validator(vector["topic_event_type"]).is_valid(instance)
    assert ("valid" if valid else "invalid") == vector["schema"]


@pytest.mark.parametrize("vector", RECORDS + SIZED, ids=[v["name"] for v in RECORDS + SIZED])
def test_where_the_schema_and_the_consumer_differ_the_spec_names_the_rule(
    vector: dict[str, Any],
) -> None:
    # The schemas never refuse what the consumer accepts; the other way round needs a named rule.
    assert not (vector["schema"] == "invalid" and vector["expect"] == "valid")
    if vector["schema"] == "valid" and vector["expect"] != "valid":
        assert vector.get("rule") in ev.RULES
    if vector.get("rule"):
        assert vector["rule"] in SPEC, f"the spec does not state: {vector['rule']}"
        if vector["expect"] != "valid":
            assert f"`{vector['expect']}`" in _rule_row(vector["rule"])


def _rule_row(rule: str) -> str:
    """The line of the spec's table that states ``rule``."""
    return next(line for line in SPEC.splitlines() if line.startswith(f"| {rule} |"))


def test_every_rule_the_vectors_use_is_in_the_spec() -> None:
    for rule in ev.RULES:
        assert _rule_row(rule), rule


def test_the_spec_lists_exactly_the_reasons_the_consumer_dead_letters_with() -> None:
    from contracts.dead_letters import DEAD_LETTER_REASONS  # noqa: PLC0415

    section = SPEC.split("## 6. Reading a record: reasons", 1)[1].split("### ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    listed = [row.split("`")[1] for row in rows]
    assert listed == [refusal.reason for refusal in REFUSALS]  # in the order of the steps
    assert set(listed) == DEAD_LETTER_REASONS


def test_the_vectors_cover_every_refusal_reason_of_the_contract() -> None:
    from contracts.errors import CONSUMER_REASONS, RefusalReason  # noqa: PLC0415

    declared = {v["expect"] for v in RECORDS + SIZED}
    assert {r.value for r in RefusalReason if r not in CONSUMER_REASONS} <= declared


@pytest.mark.parametrize("vector", TIMESTAMPS, ids=[v["text"] for v in TIMESTAMPS])
def test_timestamps_read_as_declared(vector: dict[str, Any]) -> None:
    try:
        parsed = parse_utc(vector["text"])
    except ValueError:
        assert not vector["valid"]
        return
    assert vector["valid"]
    assert format_utc(parsed) == vector["utc"]
