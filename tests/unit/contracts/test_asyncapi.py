"""The AsyncAPI document: generated from the registry, checked in, valid for the official
AsyncAPI parser, and saying the same as the JSON Schemas and the consumer engine."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from contracts import envelope_json_schema
from contracts.asyncapi import ASYNCAPI_FILE_NAME, record_key_of
from contracts.dead_letters import DEAD_LETTER_HEADERS, DEAD_LETTER_REASONS, REDRIVE_HEADERS
from spectral.cli.contracts import DEFAULT_SCHEMA_DIR, published_files
from spectral.kafka.dlq import DeadLetter, redrive_headers
from tests.events import EVENTS

ROOT = Path(__file__).resolve().parents[3]
TOOLING = ROOT / "tests" / "asyncapi"
DOCUMENT_PATH = DEFAULT_SCHEMA_DIR / ASYNCAPI_FILE_NAME


def document() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DOCUMENT_PATH.read_text("utf-8"))
    return loaded


def test_the_checked_in_document_is_the_generated_one() -> None:
    assert DOCUMENT_PATH.read_text("utf-8") == published_files()[ASYNCAPI_FILE_NAME], (
        "out of date: run `spectral contracts export` and commit"
    )


def official_parser(path: Path) -> subprocess.CompletedProcess[str]:
    """tests/asyncapi/validate.mjs (@asyncapi/parser) run on ``path``."""
    node = shutil.which("node")
    assert node is not None, "node is needed (apt-get install -y nodejs npm)"
    assert (TOOLING / "node_modules" / "@asyncapi" / "parser").is_dir(), (
        "the AsyncAPI parser is not installed: run `make tooling`"
    )
    return subprocess.run(
        [node, "validate.mjs", str(path)],
        cwd=TOOLING,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_official_parser_finds_no_error() -> None:
    done = official_parser(DOCUMENT_PATH)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "valid AsyncAPI 3.1.0" in done.stdout


def test_the_parser_does_refuse_a_broken_document(tmp_path: Path) -> None:
    broken = document()
    broken["operations"][next(iter(broken["operations"]))]["action"] = "publish"
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(broken))
    done = official_parser(path)
    assert done.returncode == 1
    assert "action" in done.stdout


@pytest.mark.parametrize("spec", EVENTS.specs(), ids=EVENTS.event_types())
def test_every_event_type_has_its_channel_message_key_and_dead_letter_channel(spec: Any) -> None:
    doc = document()
    channel_id = spec.event_type.replace(".", "_")
    channel = doc["channels"][channel_id]
    assert channel["address"] == "{prefix}" + spec.event_type
    assert doc["channels"][f"{channel_id}_dlq"]["address"] == "{prefix}" + spec.event_type + ".dlq"
    name = f"{spec.event_type}.v{spec.schema_version}"
    message = doc["components"]["messages"][name]
    assert message["bindings"]["kafka"]["key"]["pattern"] == record_key_of(spec)[1]
    # The message payload is the JSON Schema of the envelope, definitions moved to components.
    published = envelope_json_schema(spec)
    payload = doc["components"]["schemas"][name]
    text = json.dumps(payload).replace("#/components/schemas/", "#/$defs/")
    expected = {k: v for k, v in published.items() if k not in {"$defs", "$schema", "$id"}}
    assert json.loads(text) == expected
    for def_name, definition in published["$defs"].items():
        moved = json.dumps(doc["components"]["schemas"][def_name])
        assert json.loads(moved.replace("#/components/schemas/", "#/$defs/")) == definition


def test_dead_letters_are_described_with_every_reason_and_header_the_engine_writes() -> None:
    message = document()["components"]["messages"]["DeadLetter"]
    headers = message["headers"]
    reasons = [option["const"] for option in headers["properties"]["dlq.reason"]["oneOf"]]
    assert len(reasons) == len(set(reasons))
    assert set(reasons) == DEAD_LETTER_REASONS
    letter = DeadLetter(
        reason="not_json",
        detail="x",
        source_topic="t",
        source_partition=0,
        source_offset=1,
        consumer="c",
        key=None,
        value=b"{",
        original_headers=(("event_type", b"x"), ("dlq.redriven_from", b"t.dlq:0:1")),
    )
    own = [name for name, _ in letter.headers() if name.startswith("dlq.")]
    # every dlq.* header a dead letter carries is described and required, and only those
    assert own == [header.name for header in DEAD_LETTER_HEADERS]
    assert headers["required"] == own
    assert set(headers["properties"]) == set(own)
    reference = letter.as_reference("too large for the dead-letter topic")
    assert [name for name, _ in reference.headers()] == own


def test_every_event_message_describes_the_headers_a_redrive_adds() -> None:
    added = [name for name, _ in redrive_headers((), "t.dlq", 0, 1) if name.startswith("dlq.")]
    assert added == [header.name for header in REDRIVE_HEADERS]
    for name, message in document()["components"]["messages"].items():
        if name != "DeadLetter":
            assert set(added) <= set(message["headers"]["properties"]), name


def test_the_consumers_receive_what_their_handlers_declare() -> None:
    operations = document()["operations"]
    receives = {
        (op["bindings"]["kafka"]["groupId"]["default"], op["channel"]["$ref"].split("/")[-1])
        for op in operations.values()
        if op["action"] == "receive"
    }
    assert receives == {
        ("rule-candidates", "platform_failure_cluster_detected"),
        ("work-executor", "work_item_enqueued"),
    }


def test_the_topic_settings_are_those_topics_apply_declares_and_the_spec_states() -> None:
    from spectral.cli.contracts import declared_topic_settings  # noqa: PLC0415

    spec = (DEFAULT_SCHEMA_DIR / "README.md").read_text("utf-8")
    settings = declared_topic_settings()
    channels = document()["channels"]
    for name, declared in settings.items():
        binding = channels[name.replace(".", "_")]["bindings"]["kafka"]
        assert binding["partitions"] == declared.partitions
        assert binding["topicConfiguration"]["retention.ms"] == int(declared.config["retention.ms"])
        limit = declared.config["max.message.bytes"]
        assert binding["topicConfiguration"]["max.message.bytes"] == int(limit)
        if not name.endswith(".dlq"):
            assert limit in spec
            assert declared.config["retention.ms"] in spec


def test_the_tooling_names_only_files_that_exist() -> None:
    package = json.loads((TOOLING / "package.json").read_text("utf-8"))
    named = re.findall(r"[\w./-]+\.(?:json|yaml|mjs)", json.dumps(package))
    assert named
    for name in named:
        in_tooling = TOOLING / name
        assert in_tooling.exists() or (ROOT / name).exists(), name
