"""FailureClusterService's instruments, in one place; label values from fixed enums."""

from __future__ import annotations

from enum import StrEnum

from prometheus_client import CollectorRegistry, Counter


class LeaseOutcome(StrEnum):
    WON = "won"  # our INSERT landed: we call the model
    LOST = "lost"  # another replica holds (or finished) the lease: no call
    RECOVERED = "recovered"  # a stale pending lease re-claimed by the recovery clause
    SUPERSEDED = "superseded"  # a recovered lease whose content is no longer current: no call


class ModelOutcome(StrEnum):
    OK = "ok"
    FAILED = "failed"


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
