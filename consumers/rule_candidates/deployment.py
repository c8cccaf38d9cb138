"""The ``rule-candidates`` deployment's factory: ``spectral consume rule-candidates`` runs the
handler it builds (declared in plugin.py)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from consumers.rule_candidates.handler import RuleCandidatesHandler
from consumers.rule_candidates.metrics import RuleCandidateMetrics
from spectral.settings import Settings


def build(
    settings: Settings,  # noqa: ARG001 - the factory signature every deployment shares
    database_url: str,  # noqa: ARG001 - the engine owns the pool (role = handler.database_role)
    registry: CollectorRegistry,
) -> RuleCandidatesHandler:
    """The handler the engine runs for ``spectral consume rule-candidates``."""
    return RuleCandidatesHandler(RuleCandidateMetrics(registry))
