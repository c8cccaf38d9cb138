"""The work executor as a plugin of spectral: the ``work-executor`` deployment (its settings are
the durable-work feature's, producers/work/plugin.py)."""

from __future__ import annotations

from typing import Final

from spectral.extend import Deployment, Plugin

PLUGIN: Final = Plugin(deployments=(Deployment("work-executor", ".deployment:build"),))
