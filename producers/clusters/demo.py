"""Demo input for newcomers (`make demo`): deterministic failure observations.

``demo_data(n)`` returns ``n`` failures spread over a few workspaces, rules and failure modes,
the same ones every time (a seeded generator and fixed ids), so the demo prints the same
clusters on every run. ``sample_failures.jsonl`` beside this module holds ``demo_data(120)`` as
JSON lines, for ``spectral clusters ingest producers/clusters/sample_failures.jsonl``.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final
from uuid import UUID

import orjson

from producers.clusters.model import FailureObservation

SAMPLE_FILE: Final = Path(__file__).with_name("sample_failures.jsonl")
_START: Final = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)
_WORKSPACES: Final = (
    UUID("5f0c7d1e-0000-4000-8000-000000000001"),
    UUID("5f0c7d1e-0000-4000-8000-000000000002"),
)
_RULES: Final = (
    UUID("a11ce000-0000-4000-8000-00000000000a"),  # tls-certificate-expiry
    UUID("a11ce000-0000-4000-8000-00000000000b"),  # s3-bucket-public-read
    UUID("a11ce000-0000-4000-8000-00000000000c"),  # iam-key-rotation
)
_ONE_WORKSPACE_RULES: Final = frozenset({2})  # iam-key-rotation fails in one workspace only
# (rule index, signature, summary template, weight)
_MODES: Final = (
    (0, "tls.handshake_timeout", "TLS handshake to {host} timed out after {n}s", 6),
    (0, "tls.chain_incomplete", "certificate chain for {host} is missing an intermediate", 2),
    (1, "s3.acl_unreadable", "bucket ACL of {bucket} could not be read: AccessDenied", 4),
    (2, "iam.paginator_truncated", "listing access keys stopped after {n} pages", 1),
)


def demo_data(n: int = 120, seed: int = 57) -> list[FailureObservation]:
    """``n`` deterministic failures (ids demo-00001...)."""
    rng = random.Random(seed)  # noqa: S311 - demo data, not security
    weights = [mode[3] for mode in _MODES]
    failures: list[FailureObservation] = []
    for index in range(n):
        rule, signature, template, _ = rng.choices(_MODES, weights=weights)[0]
        workspace = _WORKSPACES[rng.randrange(len(_WORKSPACES))]
        if rule in _ONE_WORKSPACE_RULES:
            workspace = _WORKSPACES[0]
        summary = template.format(
            host=f"api-{rng.randrange(1, 5)}.example.com",
            bucket=f"logs-{rng.randrange(1, 4)}",
            n=rng.choice((10, 30, 45)),
        )
        failures.append(
            FailureObservation(
                failure_id=f"demo-{index + 1:05d}",
                rule_id=_RULES[rule],
                workspace_id=workspace,
                observed_at=_START + timedelta(minutes=7 * index + rng.randrange(7)),
                summary=summary,
                signature=signature,
                scan_id=f"scan-{index // 10 + 1:03d}",
            )
        )
    return failures


def demo_lines(n: int = 120, seed: int = 57) -> list[bytes]:
    """``demo_data`` as JSON lines (what ``spectral clusters ingest`` reads)."""
    return [orjson.dumps(f.model_dump(mode="json")) for f in demo_data(n, seed)]


def write_sample(path: Path = SAMPLE_FILE, n: int = 120) -> Path:
    path.write_bytes(b"\n".join(demo_lines(n)) + b"\n")
    return path
