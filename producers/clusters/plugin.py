"""Failure clusters as a plugin of spectral: the snapshot event type, ``spectral clusters`` and
``spectral demo`` (a tour of every built-in feature)."""

from __future__ import annotations

from typing import Final

from spectral.extend import Command, Plugin

PLUGIN: Final = Plugin(
    events=(".events:SPECS",),
    commands=(
        Command(
            "clusters",
            "FailureClusterService: failures in, cluster snapshots out (ADR-057).",
            ".cli:app",
        ),
        Command("demo", "Show both streams working end to end.", ".tour:demo"),
    ),
    settings=".settings:ClusterSettings",
    retention=(".retention:tasks",),
)
