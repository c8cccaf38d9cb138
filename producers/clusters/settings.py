"""The failure-clusters feature's settings section. Declared in plugin.py; read with
``ClusterSettings.of(settings)``."""

from __future__ import annotations

from pydantic import Field

from spectral.settings import PluginSettings


class ClusterSettings(PluginSettings):
    """What the clusters feature's retention reads."""

    cluster_failure_retention_seconds: float = Field(
        default=30 * 86_400.0,
        ge=0,
        description="Ingested failures (clusters.failures) recorded longer ago are pruned by "
        "`spectral maintenance` once no snapshot needs them one by one (what it needs is "
        "rolled up first); ingest is idempotent by failure_id within this window. 0 keeps them "
        "for ever.",
    )
