"""FailureClusterService: rule-evaluation failures in, failure-cluster snapshots out (ADR-057).

Python API for services embedding the producer::

    from producers.clusters import FailureClusterService, FailureObservation

    async with FailureClusterService.connect(database_url) as service:
        await service.ingest([FailureObservation(...), ...])
        await service.tick()

A cluster's suggested rule stub is paid work on the work ledger (stub.py), run by the
``work-executor`` deployment. The names are imported when first used: importing the package
(as spectral does to read the feature's plugin declaration, plugin.py) loads nothing else.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from producers.clusters.demo import demo_data
    from producers.clusters.metrics import ClusterMetrics
    from producers.clusters.model import FailureObservation, derive_signature, parse_line
    from producers.clusters.policy import ClusterPolicy
    from producers.clusters.service import FailureClusterService, IngestSummary, TickReport
    from producers.clusters.severity import Criticality, SeverityPolicy, derive_severity

_MODULE_OF: Final = {
    "demo_data": ".demo",
    "ClusterMetrics": ".metrics",
    "FailureObservation": ".model",
    "derive_signature": ".model",
    "parse_line": ".model",
    "ClusterPolicy": ".policy",
    "FailureClusterService": ".service",
    "IngestSummary": ".service",
    "TickReport": ".service",
    "Criticality": ".severity",
    "SeverityPolicy": ".severity",
    "derive_severity": ".severity",
}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)


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
