"""The evidence bundle the upsert receives (repository.py ``evidence_bytes``): exactly the bytes
the record carried, so the database parses the same bundle it parsed from the whole record."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from consumers.rule_candidates.repository import evidence_bytes
from tests.unit.contracts.factories import cluster_event, dumps, evidence, wire

_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)


def _bundle(record: bytes) -> Any:
    return json.loads(record)["payload"]["evidence_bundle"]


def test_the_bundle_is_sent_as_its_bytes_on_the_wire() -> None:
    record = dumps(wire(cluster_event(evidence_bundle=evidence(3))))
    sent = evidence_bytes(record)
    assert sent.startswith(b"[")
    assert sent in record
    assert json.loads(sent) == _bundle(record)


@given(extra=st.dictionaries(st.text(min_size=1), _JSON_VALUES, max_size=3), spaced=st.booleans())
def test_unknown_members_anywhere_are_kept_and_skipped(extra: dict[str, Any], spaced: bool) -> None:
    obj = wire(cluster_event(evidence_bundle=evidence(2)))
    obj["payload"]["evidence_bundle"][0].update(extra)
    obj["payload"]["added_later"] = extra
    obj["trace"] = extra
    record = json.dumps(obj, indent=1 if spaced else None).encode()
    assert json.loads(evidence_bytes(record)) == _bundle(record)


def test_a_member_named_twice_counts_by_its_last_occurrence_as_in_jsonb() -> None:
    record = dumps(wire(cluster_event(evidence_bundle=evidence(1))))
    twice = record.replace(b'"evidence_bundle":', b'"evidence_bundle":[{"x":1}],"evidence_bundle":')
    assert json.loads(evidence_bytes(twice)) == _bundle(record)


def test_a_record_nested_deeper_than_the_reader_goes_is_sent_whole() -> None:
    # The reader of records parses 1,024 levels; the database then takes the bundle from the
    # whole record, as the upsert always could.
    record = dumps(wire(cluster_event(evidence_bundle=evidence(1))))
    deep = b"[" * 1022 + b'"x"' + b"]" * 1022
    nested = record[:-1] + b',"trace":' + deep + b"}"
    assert evidence_bytes(nested) == nested
