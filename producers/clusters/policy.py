"""The producer's tunables, in one frozen value (defaults documented where they are used)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from producers.clusters.evidence import EVIDENCE_LIMIT
from producers.clusters.severity import Criticality, SeverityPolicy
from spectral.retry import Backoff

CAP_FACTOR = 10


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
    # ADR-0008 for the stub worker: paid calls per (cluster, content) at most, and the base of
    # the capped backoff between them: retry n waits min(base * 2^(n-1), base * 10).
    stub_max_attempts: int = 3
    stub_retry_base: timedelta = timedelta(seconds=1)
    # Failures recorded longer ago are pruned by `spectral maintenance` once no snapshot needs
    # them one by one (retention.py); ingest is idempotent by failure_id within it. None keeps
    # them for ever.
    failure_retention: timedelta | None = timedelta(days=30)

    def __post_init__(self) -> None:
        if not 1 <= self.evidence_limit <= EVIDENCE_LIMIT:
            raise ValueError(f"evidence_limit must be within 1..{EVIDENCE_LIMIT}")
        if self.min_failures < 1:
            raise ValueError("min_failures must be at least 1")
        if self.stub_lease_timeout <= timedelta(0):
            raise ValueError("stub_lease_timeout must be positive")
        if self.batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if self.stub_max_attempts < 1:
            raise ValueError("stub_max_attempts must be at least 1")
        if self.stub_retry_base <= timedelta(0):
            raise ValueError("stub_retry_base must be positive")
        if self.failure_retention is not None and self.failure_retention <= timedelta(0):
            raise ValueError("failure_retention must be positive")

    def stub_retry(self, attempt: int, *, permanent: bool) -> timedelta | None:
        """After stub attempt ``attempt`` failed: the wait before the next one, or None to give
        up (a permanent failure, or the last attempt). Pure."""
        if permanent or attempt >= self.stub_max_attempts:
            return None
        base = self.stub_retry_base.total_seconds()
        return timedelta(seconds=Backoff(base=base, cap=base * CAP_FACTOR).delay(attempt))
