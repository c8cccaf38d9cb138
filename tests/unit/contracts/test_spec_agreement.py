"""The spec (schemas/events/README.md) and the AsyncAPI document say the same thing.

Both are checked in. The README's tables marked "generated" and asyncapi.json come from the
same definitions (the registry, contracts.dead_letters); these tests read the two files as a
reader would, the README's Markdown tables and the AsyncAPI JSON, and compare what each says:
the envelope fields, who may publish each type, the keys, the refusal reasons, the dead-letter
and redrive headers, the topic and producer settings.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from contracts import MAX_PRODUCE_BYTES, MAX_RECORD_BYTES
from contracts.spec_tables import blocks_in, fill_tables, readme_tables
from spectral.kafka.dlq import HISTORY_ITEMS
from tests.events import EVENTS

ROOT = Path(__file__).resolve().parents[3]
SPEC_PATH = ROOT / "schemas" / "events" / "README.md"
SPEC = SPEC_PATH.read_text("utf-8")
DOCUMENT: dict[str, Any] = json.loads(SPEC_PATH.with_name("asyncapi.json").read_text("utf-8"))
MESSAGES: dict[str, Any] = DOCUMENT["components"]["messages"]
SCHEMAS: dict[str, Any] = DOCUMENT["components"]["schemas"]


def table_after(marker: str) -> list[list[str]]:
    """The rows (cells, stripped) of the first Markdown table after ``marker`` in the spec."""
    rest = SPEC[SPEC.index(marker) :].splitlines()
    start = next(i for i, line in enumerate(rest) if line.startswith("|"))
    rows = []
    for line in rest[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
        rows.append([cell.strip().replace("\\|", "|") for cell in cells])
    return rows


def generated(name: str) -> list[list[str]]:
    return table_after(f"<!-- generated: {name} (spectral contracts export) -->")


def plain(text: str) -> str:
    return " ".join(text.split())


def test_the_generated_tables_are_current() -> None:
    tables = readme_tables(EVENTS)
    assert fill_tables(SPEC, tables) == SPEC, "run `spectral contracts export` and commit"
    assert sorted(blocks_in(SPEC)) == sorted(tables)  # every table is in the spec, once


def test_a_block_naming_no_table_is_refused() -> None:
    text = (
        "<!-- generated: nonsense (spectral contracts export) -->\n<!-- end generated: nonsense -->"
    )
    with pytest.raises(ValueError, match="nonsense"):
        fill_tables(text, readme_tables(EVENTS))


def test_the_envelope_fields_are_those_of_every_message_with_the_same_rules() -> None:
    rows = generated("envelope")
    for spec in EVENTS.specs():
        schema = SCHEMAS[f"{spec.event_type}.v{spec.schema_version}"]
        assert sorted(row[0].strip("`") for row in rows) == sorted(schema["properties"])
        for field, _kind, rule in rows:
            described = plain(schema["properties"][field.strip("`")]["description"])
            assert described.startswith(rule), field  # timestamps add their format after it
        required = {row[0].strip("`") for row in rows if "may be absent on input" not in row[2]}
        assert set(schema["required"]) == required


def test_who_publishes_each_type_and_its_keys_agree() -> None:
    operations = DOCUMENT["operations"]
    rows = generated("event-types")
    assert sorted(row[0].strip("`") for row in rows) == sorted(EVENTS.event_types())
    for event_type, version, publishers, idempotency_key, record_key in rows:
        name = event_type.strip("`")
        channel = name.replace(".", "_")
        message = MESSAGES[f"{name}.v{version}"]
        if publishers == "any producer":
            assert f"publish_{channel}" in operations
            assert f"spectral_publishes_{channel}" not in operations
        else:
            assert publishers == "spectral only"
            assert f"publish_{channel}" not in operations
            summary = operations[f"spectral_publishes_{channel}"]["summary"]
            assert "Outside producers must not publish" in summary
        headers = message["headers"]["properties"]
        assert idempotency_key in headers["idempotency_key"]["description"]
        assert record_key in message["bindings"]["kafka"]["key"]["description"]


def test_the_work_stream_is_spectral_s_own_in_the_prose_too() -> None:
    section = SPEC[SPEC.index("### The work stream") : SPEC.index("## 3. Keys")]
    assert "**Outside producers must not\npublish them**" in section
    rows = generated("event-types")
    spectral_only = {row[0].strip("`") for row in rows if row[2] != "any producer"}
    assert spectral_only == {t for t in EVENTS.event_types() if t.startswith("work.")}


def test_the_refusal_reasons_agree_in_order_and_wording() -> None:
    rows = generated("reasons")
    options = MESSAGES["DeadLetter"]["headers"]["properties"]["dlq.reason"]["oneOf"]
    described = {option["const"]: plain(option["description"]).lower() for option in options}
    assert list(described) == list(dict.fromkeys(row[0].strip("`") for row in rows))
    for reason, when in rows:
        assert plain(when).lower() in described[reason.strip("`")], reason


def test_a_dead_letter_carries_the_headers_both_documents_list_all_of_them_always() -> None:
    rows = generated("dead-letter-headers")
    headers = MESSAGES["DeadLetter"]["headers"]
    names = [row[0].strip("`") for row in rows]
    assert headers["required"] == names
    assert list(headers["properties"]) == sorted(names)  # the document's keys are sorted
    for name, meaning in rows:
        described = headers["properties"][name.strip("`")]["description"]
        assert plain(meaning).lower() in described.lower()
    history = {row[0].strip("`"): row[1] for row in rows}["dlq.history"]
    assert f"Bounded to {HISTORY_ITEMS} items" in history


def test_every_event_message_describes_the_redrive_headers_of_the_spec() -> None:
    rows = generated("redrive-headers")
    for name, message in MESSAGES.items():
        if name == "DeadLetter":
            continue
        headers = message["headers"]["properties"]
        for header, meaning in rows:
            assert plain(meaning).lower() in headers[header.strip("`")]["description"].lower()


def test_the_announced_state_is_the_one_the_spec_names() -> None:
    state = SCHEMAS["WorkItemStateChangedPayload"]["properties"]["state"]
    values = [option.get("const") for option in state["anyOf"] if option.get("type") == "string"]
    assert values == ["canceled"]
    row = next(line for line in SPEC.splitlines() if line.startswith("| `work.item.state_changed`"))
    assert "its one value is `canceled`" in row
    assert "A *parked* item (waiting for its org's budget) is not announced" in row


def _binding(channel: str) -> dict[str, Any]:
    binding: dict[str, Any] = DOCUMENT["channels"][channel]["bindings"]["kafka"]
    return binding


def test_the_topic_settings_table_states_the_bindings() -> None:
    header = "| setting | event topic | dead-letter topic | why |"
    rows = {row[0]: row for row in table_after(header)}
    event = _binding("platform_failure_cluster_detected")["topicConfiguration"]
    dead = _binding("platform_failure_cluster_detected_dlq")["topicConfiguration"]
    size = rows["`max.message.bytes`"]
    assert size[1].startswith(f"{event['max.message.bytes']} (")
    headroom = int(size[2].removeprefix("the source's limit plus "))
    assert dead["max.message.bytes"] == event["max.message.bytes"] + headroom
    retention = rows["`cleanup.policy`, `retention.ms`"]
    assert retention[1].startswith(f"`delete`, {event['retention.ms']} (")
    assert retention[2].startswith(f"`delete`, {dead['retention.ms']} (")


def test_producers_are_told_to_send_records_as_large_as_the_topics_take() -> None:
    rows = {row[0]: row for row in table_after("| setting | value | why |")}
    limit = _binding("platform_failure_cluster_detected")["topicConfiguration"]["max.message.bytes"]
    assert limit == MAX_PRODUCE_BYTES > MAX_RECORD_BYTES
    assert rows["request (or batch) size limit"][1].startswith(f"at least **{limit}** bytes")
    assert rows["acknowledgements"][1] == "`acks=all`"


def test_the_client_notes_ask_every_family_for_the_contract_s_request_limit() -> None:
    page = (ROOT / "docs" / "howto" / "produce-from-another-language.md").read_text("utf-8")
    limit = str(MAX_PRODUCE_BYTES)
    for setting in (
        f"MAX_REQUEST_SIZE_CONFIG, {limit}",  # Java kafka-clients
        f"message.max.bytes={limit}",  # librdkafka
        f"ProducerBatchMaxBytes({limit})",  # franz-go
        f"max_request_size={limit}",  # aiokafka
    ):
        assert setting in page, setting
    assert f"at least **{limit}** bytes" in page
    for heading in ("## Java", "## librdkafka", "## Go: franz-go", "## Node: kafkajs", "## Python"):
        assert f"\n{heading}" in page
