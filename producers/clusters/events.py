"""The event type this feature registers: ``platform.failure_cluster.detected`` (its model and
snapshot hash are in contracts/failure_cluster.py)."""

from __future__ import annotations

from typing import Final

from contracts.failure_cluster import FAILURE_CLUSTER_SPEC

SPECS: Final = (FAILURE_CLUSTER_SPEC,)
