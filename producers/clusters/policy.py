"""The producer's tunables, in one frozen value (defaults documented where they are used)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from producers.clusters.evidence import EVIDENCE_LIMIT
from producers.clusters.severity import Criticality, SeverityPolicy


@dataclass(frozen=True)
class ClusterPolicy:
    severity: SeverityPolicy = field(default_factory=SeverityPolicy)
    # Criticality of rules without a row in clusters.rule_criticality.
    default_criticality: Criticality = Criticality.NORMAL
    evidence_limit: int = EVIDENCE_LIMIT
    # A cluster is published once it has at least this many failures.
    min_failures: int = 1
    # Ask for a model-written suggested_rule_stub (work on the work ledger: stub.py).
    generate_stubs: bool = True
    # How long a snapshot waits for its stub's first call before it goes out without it (the
    # stub follows in a new snapshot when it comes).
    stub_wait: timedelta = timedelta(seconds=60)
    # Clusters evaluated per transaction by a tick.
    batch_size: int = 100

    def __post_init__(self) -> None:
        if not 1 <= self.evidence_limit <= EVIDENCE_LIMIT:
            raise ValueError(f"evidence_limit must be within 1..{EVIDENCE_LIMIT}")
        if self.min_failures < 1:
            raise ValueError("min_failures must be at least 1")
        if self.stub_wait < timedelta(0):
            raise ValueError("stub_wait cannot be negative")
        if self.batch_size < 1:
            raise ValueError("batch_size must be at least 1")
