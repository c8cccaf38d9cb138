"""Cross-language test vectors for snapshot_hash, built with an independent oracle.

The checked-in files under ``schemas/events/vectors/`` are produced from the cases below by the
``rfc8785`` package (an RFC 8785 implementation that is not ours) and ``xxhash``; our own
canonicalizer is only ever *compared* with them (tests/unit/contracts/test_contracts_vectors.py).

Regenerate after adding a case: ``.venv/bin/python -m tests.unit.contracts.vectors``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import rfc8785
import xxhash

VECTOR_DIR: Final = Path(__file__).resolve().parents[3] / "schemas" / "events" / "vectors"
VALID_FILE: Final = VECTOR_DIR / "snapshot_hash.json"
INVALID_FILE: Final = VECTOR_DIR / "snapshot_hash_invalid.json"

CLUSTER_ID: Final = "6f1c2b1e-4d0a-4c59-9a57-1f0e9f3b7a10"
RULE_ID: Final = "0b7e7f4e-6d2f-4f43-8b1f-3c1a2e9d5b77"
WORKSPACE_ID: Final = "9d4b1a8c-2f6e-4b7d-a1c3-5e8f0a2b4c6d"


def snapshot(**changes: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "cluster_id": CLUSTER_ID,
        "snapshot_hash": "00000000000000000000000000000000",
        "rule_id": RULE_ID,
        "workspace_id": WORKSPACE_ID,
        "severity": "medium",
        "failure_count": 3,
        "first_observed_at": "2026-11-21T10:00:00.000000Z",
        "last_observed_at": "2026-11-21T12:30:00.250000Z",
        "evidence_bundle": [
            {
                "failure_id": "scan-1/finding-1",
                "observed_at": "2026-11-21T10:00:00.000000Z",
                "summary": "bucket acme-logs allows public read",
            },
            {
                "failure_id": "scan-2/finding-7",
                "observed_at": "2026-11-21T12:30:00.250000Z",
                "summary": "bucket acme-backup allows public read",
            },
        ],
        "suggested_rule_stub": None,
    }
    payload.update(changes)
    return payload


def _reordered(value: Any) -> Any:
    """The same JSON value with every object's keys in reverse order."""
    if isinstance(value, dict):
        return {key: _reordered(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [_reordered(item) for item in value]
    return value


ALL_CONTROLS: Final = "".join(chr(c) for c in range(1, 0x20))
"""Every control character but U+0000, which the contract refuses in any string."""

CASES: Final[list[tuple[str, dict[str, Any]]]] = [
    ("failure_cluster_minimal", snapshot()),
    ("failure_cluster_reordered_keys", _reordered(snapshot())),
    (
        "failure_cluster_other_cluster_id_and_hash",
        snapshot(
            cluster_id="11111111-2222-4333-8444-555555555555",
            snapshot_hash="ffffffffffffffffffffffffffffffff",
        ),
    ),
    (
        "failure_cluster_with_rule_stub",
        snapshot(
            severity="high",
            failure_count=1234,
            suggested_rule_stub=(
                'rule "public-read" {\n\tmatch: bucket.acl == "public-read"\n'
                "\tpath: C:\\\\logs\\\\*\n}\n"
            ),
        ),
    ),
    (
        "failure_cluster_empty_evidence",
        snapshot(failure_count=1, evidence_bundle=[], severity="low"),
    ),
    (
        "non_ascii_text",
        snapshot(
            evidence_bundle=[
                {
                    "failure_id": "scan-3/finding-9",
                    "observed_at": "2026-11-21T11:00:00.000000Z",
                    "summary": (
                        "Prüfung fehlgeschlagen: café, naïve, Ελληνικά, русский, 日本語, "
                        "한국어, עברית, العربية, e\u0301 (combining), 😀🚀 (astral), \u00a0nbsp"
                    ),
                }
            ]
        ),
    ),
    (
        "control_characters",
        {
            "summary": ALL_CONTROLS,
            "del_and_separators": "\x7f \u2028 \u2029 \u0085 \ufeff",
            "escaped_short_forms": "\b\t\n\f\r",
        },
    ),
    (
        "quotes_and_backslashes",
        {
            "quote": '"',
            "backslash": "\\",
            "both": '\\"\\\\""',
            "solidus_not_escaped": "a/b</script>",
            "looks_like_escape": "\\u0041\\n",
        },
    ),
    (
        "nested_objects_and_literals",
        {
            "outer": {
                "inner": {"deep": {"list": [1, [2, [3, {}]], [], {"k": None}]}},
                "flags": [True, False, None],
            },
            "empty_object": {},
            "empty_array": [],
            "empty_string": "",
        },
    ),
    (
        "unknown_fields_are_hashed",
        snapshot(
            blast_radius={"accounts": 3, "regions": ["eu-west-1", "us-east-1"]},
            evidence_bundle=[
                {
                    "failure_id": "scan-1/finding-1",
                    "observed_at": "2026-11-21T10:00:00.000000Z",
                    "summary": "bucket acme-logs allows public read",
                    "resource_arn": "arn:aws:s3:::acme-logs",
                }
            ],
        ),
    ),
    (
        "integers",
        {
            "zero": 0,
            "negative": -1,
            "max_safe": 9007199254740991,
            "min_safe": -9007199254740991,
            "list": [10, 100, 1000],
        },
    ),
    (
        "key_order_ascii",
        {"b": 1, "a": 2, "B": 3, "A": 4, "_": 5, "1": 6, "10": 7, "2": 8, "": 9, " ": 10},
    ),
    (
        "key_order_utf16_bmp_private_use_vs_astral",
        {
            "\ue000": "private use U+E000 sorts AFTER astral in UTF-16",
            "\U0001f600": "astral U+1F600 is D83D DE00 in UTF-16",
            "\uffff": "U+FFFF",
            "\U00010000": "U+10000 is D800 DC00 in UTF-16",
            "\ud7ff": "U+D7FF sorts before every surrogate",
            "z": "ascii",
        },
    ),
    (
        "key_order_non_ascii",
        {"é": 1, "e": 2, "ž": 3, "z": 4, "日": 5, "\uff41": 6, "\u00a0": 7},
    ),
    ("only_excluded_keys", {"cluster_id": CLUSTER_ID, "snapshot_hash": "x"}),
    ("empty_object", {}),
]

INVALID_CASES: Final[list[tuple[str, str, str]]] = [
    ("float_value", '{"failure_count": 1.5}', "invalid_payload"),
    ("float_integral_value", '{"failure_count": 1.0}', "invalid_payload"),
    ("exponent_number", '{"failure_count": 1e3}', "invalid_payload"),
    ("nested_float", '{"extra": {"score": [1, 0.25]}}', "invalid_payload"),
    ("integer_above_2_53_minus_1", '{"failure_count": 9007199254740992}', "invalid_payload"),
    ("integer_below_minus_2_53_plus_1", '{"n": -9007199254740992}', "invalid_payload"),
    (
        "nested_deeper_than_64_levels",
        '{"extra": ' + "[" * 64 + "]" * 64 + "}",
        "invalid_payload",
    ),
    ("lone_high_surrogate", '{"summary": "\\ud800"}', "not_json"),
    ("lone_low_surrogate_in_key", '{"\\udc00": 1}', "not_json"),
    ("nan_literal", '{"n": NaN}', "not_json"),
    ("trailing_content", '{"a": 1} {"b": 2}', "not_json"),
    ("top_level_array", "[1, 2]", "not_an_object"),
    ("top_level_string", '"payload"', "not_an_object"),
    ("nul_in_a_string", '{"summary": "\\u0000"}', "invalid_payload"),
]


CLUSTER_PAYLOAD_CASES: Final = frozenset(
    {
        "failure_cluster_minimal",
        "failure_cluster_reordered_keys",
        "failure_cluster_other_cluster_id_and_hash",
        "failure_cluster_with_rule_stub",
        "failure_cluster_empty_evidence",
        "non_ascii_text",
        "unknown_fields_are_hashed",
    }
)
"""The cases that are whole failure-cluster payloads (the others exercise the hash alone)."""


def canonical_oracle(payload: dict[str, Any]) -> bytes:
    """RFC 8785 bytes of the payload without cluster_id and snapshot_hash, by the oracle."""
    body = {k: v for k, v in payload.items() if k not in {"cluster_id", "snapshot_hash"}}
    return rfc8785.dumps(body)


def build_vectors() -> list[dict[str, Any]]:
    out = []
    for name, payload in CASES:
        canonical = canonical_oracle(payload)
        out.append(
            {
                "name": name,
                "payload": payload,
                "canonical": canonical.decode("utf-8"),
                "snapshot_hash": xxhash.xxh3_128_hexdigest(canonical),
            }
        )
    return out


def build_invalid_vectors() -> list[dict[str, str]]:
    return [
        {"name": name, "payload_text": text, "reason": reason}
        for name, text, reason in INVALID_CASES
    ]


def render(value: Any) -> str:
    """File text: two-space indent, trailing newline, ASCII only (every non-ASCII character is a
    JSON escape of the *file*, so invisible and separator characters survive any tool).
    """
    return json.dumps(value, indent=2, ensure_ascii=True) + "\n"


def main() -> None:
    VECTOR_DIR.mkdir(parents=True, exist_ok=True)
    VALID_FILE.write_text(render(build_vectors()), "utf-8")
    INVALID_FILE.write_text(render(build_invalid_vectors()), "utf-8")


if __name__ == "__main__":
    main()
