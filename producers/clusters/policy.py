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
    # Ask the synthesizer for a suggested_rule_stub (ADR-0023 lease-then-LLM).
    generate_stubs: bool = True
    # A pending stub lease older than this is stale: the recovery clause re-claims it.
    # It must exceed the model call's own timeout (ADR-0023: 5 minutes).
    stub_lease_timeout: timedelta = timedelta(minutes=5)
    # Clusters evaluated per transaction by a tick.
    batch_size: int = 100

    def __post_init__(self) -> None:
        if not 1 <= self.evidence_limit <= EVIDENCE_LIMIT:
            raise ValueError(f"evidence_limit must be within 1..{EVIDENCE_LIMIT}")
        if self.min_failures < 1:
            raise ValueError("min_failures must be at least 1")
        if self.stub_lease_timeout <= timedelta(0):
            raise ValueError("stub_lease_timeout must be positive")
        if self.batch_size < 1:
            raise ValueError("batch_size must be at least 1")
