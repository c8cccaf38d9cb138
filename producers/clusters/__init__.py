"""FailureClusterService: rule-evaluation failures in, failure-cluster snapshots out (ADR-057).

Python API for services embedding the producer::

    from producers.clusters import FailureClusterService, FailureObservation

    async with FailureClusterService.connect(database_url, synthesizer=synth) as service:
        await service.ingest([FailureObservation(...), ...])
        await service.tick()
"""

from producers.clusters.demo import demo_data
from producers.clusters.metrics import ClusterMetrics
from producers.clusters.model import FailureObservation, derive_signature, parse_line
from producers.clusters.policy import ClusterPolicy
from producers.clusters.service import FailureClusterService, IngestSummary, TickReport
from producers.clusters.severity import Criticality, SeverityPolicy, derive_severity

__all__ = [
    "ClusterMetrics",
    "ClusterPolicy",
    "Criticality",
    "FailureClusterService",
    "FailureObservation",
    "IngestSummary",
    "SeverityPolicy",
    "TickReport",
    "demo_data",
    "derive_severity",
    "derive_signature",
    "parse_line",
]
