"""The rule-candidates engine run inside the benchmark's own process (for the profilers of
``benchmarks.profile`` and ``benchmarks.memory``; ``make bench`` runs it as a process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from benchmarks.stack import BenchStack
from consumers.rule_candidates.deployment import build
from spectral.engine.engine import ConsumerEngine, EngineOptions
from spectral.settings import load_settings


def rule_candidates_engine(stack: BenchStack, database_url: str, group: str) -> ConsumerEngine:
    """A rule-candidates engine over the stack's topics into ``database_url``, as a new member
    of ``group``, stopping once idle for 2 s."""
    settings = load_settings(topic_prefix=stack.topic_prefix)
    registry = CollectorRegistry()
    return ConsumerEngine(
        build(settings, database_url, registry),
        settings,
        kafka_bootstrap=stack.endpoints.kafka_bootstrap,
        database_url=database_url,
        options=EngineOptions(group=group, stop_when_idle=2),
        registry=registry,
    )
