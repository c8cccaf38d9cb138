"""Ingest lines and the clustering signature rule."""

from __future__ import annotations

import pytest

from producers.clusters.model import InvalidLineError, derive_signature, parse_line

LINE = (
    '{"failure_id": "f-1", "rule_id": "a11ce000-0000-4000-8000-00000000000a", '
    '"workspace_id": "5f0c7d1e-0000-4000-8000-000000000001", '
    '"observed_at": "2026-11-20T08:00:00Z", "summary": "boom", "scan_id": "s-9"}'
)


def test_a_line_parses_and_keeps_other_fields_as_attributes() -> None:
    failure = parse_line(LINE)
    assert failure.failure_id == "f-1"
    assert failure.attributes == {"scan_id": "s-9"}
    assert failure.grouping_signature == "boom"


def test_an_explicit_signature_wins() -> None:
    failure = parse_line(LINE.replace('"summary"', '"signature": "sig.x", "summary"'))
    assert failure.grouping_signature == "sig.x"


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("not json", "not JSON"),
        ("[1]", "not a JSON object"),
        (LINE.replace('"f-1"', '""'), "failure_id"),
        (LINE.replace("2026-11-20T08:00:00Z", "2026-11-20 08:00"), "observed_at"),
        (LINE.replace('"a11ce000-0000-4000-8000-00000000000a"', '"r"'), "rule_id"),
    ],
)
def test_invalid_lines_say_why(line: str, reason: str) -> None:
    with pytest.raises(InvalidLineError, match=reason):
        parse_line(line)


def test_derived_signatures_mask_the_variable_parts() -> None:
    a = derive_signature("Timeout after 30s on host 10.0.0.7 (req 6f1c2a9e77)")
    b = derive_signature("timeout after 45s on  host 10.0.0.9 (req 0badc0ffee12)")
    assert a == b == "timeout after #s on host # (req <hex>)"
    assert derive_signature("scan 3f2b9a0c-1111-4222-8333-444455556666 failed") == (
        "scan <id> failed"
    )
    assert derive_signature("   ") == "<empty>"
