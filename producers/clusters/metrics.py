"""FailureClusterService's instruments, in one place; label values from fixed enums.

The rule stub's paid calls are work on the work ledger: the executor counts them with every
other paid call (ADR-0008's ``synthesis_attempts_total{outcome}``,
``synthesis_duration_seconds``, ``synthesis_failures_total{reason}``; ``work_tokens_total`` and
``work_cost_total`` by ``function``). The tick counts what it asks and publishes:
``spectral_clusters_stubs_total{event}`` (asked, published_with, published_without — 3 series).
"""

from __future__ import annotations

from enum import StrEnum

from prometheus_client import CollectorRegistry, Counter

from spectral.observability.metrics import per_member


class StubEvent(StrEnum):
    ASKED = "asked"  # stub work opened on the ledger for a cluster's content
    PUBLISHED_WITH = "published_with"  # a snapshot went out with its stub
    PUBLISHED_WITHOUT = "published_without"  # without: given up, retrying, or past stub_wait


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
        self.ingested = per_member(ingested, IngestOutcome)
        self.snapshots_published = Counter(
            "spectral_clusters_snapshots_published_total",
            "Snapshots put in the outbox (their hash differed from the last one published).",
            registry=registry,
        )
        stubs = Counter(
            "spectral_clusters_stubs",
            "Rule stubs asked for (work opened on the ledger) and snapshots published with or "
            "without theirs.",
            ["event"],
            registry=registry,
        )
        self.stubs = per_member(stubs, StubEvent)
