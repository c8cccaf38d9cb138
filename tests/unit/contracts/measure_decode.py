"""Microseconds per decode of a realistic failure-cluster record (not a test; a measurement).

Run: ``.venv/bin/python -m tests.unit.contracts.measure_decode``. Prints one JSON line per
figure. The machine is shared and noisy: each figure is the best of several rounds, and the
ratio to ``json.loads`` of the same bytes is the number to compare across machines.
"""

from __future__ import annotations

import json
import timeit
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from uuid import UUID

import orjson

from contracts import FailureRef, failure_cluster_detected_event
from tests.events import decode, encode

_ROUNDS = 15
_NUMBER = 5_000


def realistic_record(summary_chars: int = 40) -> bytes:
    """A failure-cluster record with ten evidence items (about 1.3 KB at 40-character summaries)."""
    start = datetime(2026, 11, 21, 10, 0, 0, 123456, tzinfo=UTC)
    evidence = [
        FailureRef(
            failure_id=f"scan-7731/finding-{i:03d}",
            observed_at=start + timedelta(minutes=7 * i, microseconds=i),
            summary=(f"S3 bucket acme-{i} allows public read " * 10)[:summary_chars],
        )
        for i in range(10)
    ]
    envelope = failure_cluster_detected_event(
        cluster_id=UUID("6f1c2b1e-4d0a-4c59-9a57-1f0e9f3b7a10"),
        rule_id=UUID("0b7e7f4e-6d2f-4f43-8b1f-3c1a2e9d5b77"),
        workspace_id=UUID("9d4b1a8c-2f6e-4b7d-a1c3-5e8f0a2b4c6d"),
        severity="high",
        failure_count=137,
        first_observed_at=start,
        last_observed_at=start + timedelta(hours=3),
        evidence_bundle=evidence,
        occurred_at=start + timedelta(hours=3, seconds=5),
    )
    return encode(envelope)


def best_microseconds(call: Callable[[], object]) -> float:
    """Best of ``_ROUNDS`` rounds of ``_NUMBER`` calls, in microseconds per call."""
    return min(timeit.repeat(call, number=_NUMBER, repeat=_ROUNDS)) / _NUMBER * 1e6


def main() -> None:
    for summary_chars in (12, 40, 120):
        data = realistic_record(summary_chars)
        figures = {
            "json_loads_us": best_microseconds(lambda: json.loads(data)),  # noqa: B023
            "orjson_loads_us": best_microseconds(lambda: orjson.loads(data)),  # noqa: B023
            "decode_us": best_microseconds(lambda: decode(data)),  # noqa: B023
        }
        figures["decode_over_json_loads"] = figures["decode_us"] / figures["json_loads_us"]
        for name, value in figures.items():
            line = {"name": name, "record_bytes": len(data), "value": round(value, 2)}
            print(json.dumps(line))  # noqa: T201


if __name__ == "__main__":
    main()
