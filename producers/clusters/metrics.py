"""FailureClusterService's instruments, in one place; label values from fixed enums.

The rule-stub worker has ADR-0008's three instruments, named for this service:
``spectral_clusters_stub_attempts_total{outcome}`` (success, transient_failure,
permanent_failure, skipped — 4 series), ``spectral_clusters_stub_duration_seconds`` (one paid
call, 1 ms .. 65.5 s) and ``spectral_clusters_stub_failures_total{reason}`` (7 series).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram


class LeaseOutcome(StrEnum):
    WON = "won"  # our INSERT landed: we call the model
    LOST = "lost"  # another replica holds (or finished) the lease: no call
    RECOVERED = "recovered"  # a stale pending lease re-claimed by the recovery clause
    SUPERSEDED = "superseded"  # a recovered lease whose content is no longer current: no call


class ModelOutcome(StrEnum):
    OK = "ok"
    FAILED = "failed"


class StubOutcome(StrEnum):
    SUCCESS = "success"
    TRANSIENT_FAILURE = "transient_failure"  # retried after the backoff
    PERMANENT_FAILURE = "permanent_failure"  # the permanent marker: no more calls
    SKIPPED = "skipped"  # the lease was another replica's, or the content moved on


class StubFailure(StrEnum):
    SYNTHESIZER = "synthesizer"
    ROUTER_RESOLVE = "router_resolve"
    INVALID_ANSWER = "invalid_answer"
    WRITE_STUB = "write_stub"
    OUTCOME_UNKNOWN = "outcome_unknown"  # a stale lease: its holder stopped mid-call
    MAX_ATTEMPTS_EXCEEDED = "max_attempts_exceeded"
    UNKNOWN = "unknown"


DURATION_BUCKETS: Final = tuple(0.001 * 2**i for i in range(17))  # 1 ms .. 65.536 s


class IngestOutcome(StrEnum):
    NEW = "new"
    DUPLICATE = "duplicate"


class ClusterMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.clusters_detected = Counter(
            "spectral_clusters_detected_total",
            "Clusters minted at first detection (a new workspace/rule/signature key).",
            registry=registry,
        )
        ingested = Counter(
            "spectral_clusters_failures_ingested_total",
            "Ingested failure observations: new, or duplicate (failure_id already recorded).",
            ["outcome"],
            registry=registry,
        )
        self.ingested = {o: ingested.labels(o.value) for o in IngestOutcome}
        self.snapshots_published = Counter(
            "spectral_clusters_snapshots_published_total",
            "Snapshots put in the outbox (their hash differed from the last one published).",
            registry=registry,
        )
        leases = Counter(
            "spectral_clusters_stub_leases_total",
            "Rule-stub lease outcomes (ADR-0023): won, lost, recovered, superseded.",
            ["outcome"],
            registry=registry,
        )
        self.leases = {o: leases.labels(o.value) for o in LeaseOutcome}
        calls = Counter(
            "spectral_clusters_model_calls_total",
            "Synthesizer calls for suggested_rule_stub, by outcome.",
            ["outcome"],
            registry=registry,
        )
        self.model_calls = {o: calls.labels(o.value) for o in ModelOutcome}
        attempts = Counter(
            "spectral_clusters_stub_attempts",
            "Rule-stub attempts (ADR-0008), by outcome.",
            ["outcome"],
            registry=registry,
        )
        self.stub_attempts = {o: attempts.labels(o.value) for o in StubOutcome}
        self.stub_duration = Histogram(
            "spectral_clusters_stub_duration_seconds",
            "Duration of one paid rule-stub call.",
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        failures = Counter(
            "spectral_clusters_stub_failures",
            "Failures of rule-stub attempts, by reason.",
            ["reason"],
            registry=registry,
        )
        self.stub_failures = {r: failures.labels(r.value) for r in StubFailure}
