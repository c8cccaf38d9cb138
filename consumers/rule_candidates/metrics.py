"""The rule-candidates projection's instruments, with label sets fixed at construction.

Labels: ``outcome`` (applied | stale), ``severity`` (low | medium | high, anything else folded to
``other``). Every series exists from the start (zero), so rate() and absent() behave from the
first scrape.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge

from consumers.rule_candidates.churn import ChurnReading

SEVERITIES = ("low", "medium", "high")
_OTHER = "other"
OUTCOMES = ("applied", "stale")


def severity_label(value: str) -> str:
    return value if value in SEVERITIES else _OTHER


class RuleCandidateMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        labels = (*SEVERITIES, _OTHER)
        snapshots = Counter(
            "spectral_rule_candidates_snapshots_total",
            "Failure-cluster snapshots by outcome (applied, stale) and severity.",
            ["outcome", "severity"],
            registry=registry,
        )
        self._snapshots = {
            (outcome, severity): snapshots.labels(outcome, severity)
            for outcome in OUTCOMES
            for severity in labels
        }
        new_clusters = Counter(
            "spectral_rule_candidates_new_clusters_total",
            "Clusters inserted into the triage inbox for the first time, by severity.",
            ["severity"],
            registry=registry,
        )
        self._new_clusters = {s: new_clusters.labels(s) for s in labels}
        resurfaced = Counter(
            "spectral_rule_candidates_resurfaced_total",
            "Dismissed or resolved clusters that came back with a newer, different snapshot.",
            ["severity"],
            registry=registry,
        )
        self._resurfaced = {s: resurfaced.labels(s) for s in labels}
        self.churn_distinct_24h = Gauge(
            "spectral_cluster_churn_distinct_24h",
            "Distinct cluster_ids signalled (snapshot applied) in the last 24 hours.",
            registry=registry,
        )
        self.churn_baseline_24h = Gauge(
            "spectral_cluster_churn_baseline_24h",
            "Average distinct cluster_ids signalled per 24 hours over the previous 7 days.",
            registry=registry,
        )
        self.churn_baseline_windows = Gauge(
            "spectral_cluster_churn_baseline_windows",
            "How many of the previous 7 daily windows the baseline covers (0-7).",
            registry=registry,
        )

    def count_snapshots(self, outcome: str, by_severity: Mapping[str, int]) -> None:
        for severity, count in by_severity.items():
            if count:
                self._snapshots[(outcome, severity_label(severity))].inc(count)

    def count_new_clusters(self, by_severity: Mapping[str, int]) -> None:
        for severity, count in by_severity.items():
            if count:
                self._new_clusters[severity_label(severity)].inc(count)

    def count_resurfaced(self, by_severity: Mapping[str, int]) -> None:
        for severity, count in by_severity.items():
            if count:
                self._resurfaced[severity_label(severity)].inc(count)

    def set_churn(self, current: ChurnReading) -> None:
        self.churn_distinct_24h.set(current.distinct_24h)
        self.churn_baseline_24h.set(current.baseline_24h)
        self.churn_baseline_windows.set(current.baseline_windows)
