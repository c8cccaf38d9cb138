"""The alerting rules name only series the rule-candidates metrics really export."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from consumers.rule_candidates.metrics import RuleCandidateMetrics

RULES = Path(__file__).resolve().parents[3] / "deploy" / "prometheus" / "spectral-alerts.yaml"


def test_every_series_in_the_rules_is_exported() -> None:
    registry = CollectorRegistry()
    RuleCandidateMetrics(registry)
    exported = {sample.name for metric in registry.collect() for sample in metric.samples}
    # The churn rules' series (every other rule: tests/unit/test_deployment_files.py).
    text = RULES.read_text(encoding="utf-8")
    referenced = set(re.findall(r"\bspectral_cluster_[a-z0-9_]+", text))
    assert referenced
    assert referenced <= exported, referenced - exported


def test_the_churn_rule_uses_the_documented_factor() -> None:
    text = RULES.read_text(encoding="utf-8")
    assert "> 3 * max(spectral_cluster_churn_baseline_24h)" in text
