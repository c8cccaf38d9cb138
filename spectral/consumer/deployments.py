"""Consumer deployments by name. Each entry names a factory ``build(settings, database_url,
registry) -> Handler`` in its module; modules are imported only when their deployment runs, so
the engine does not depend on the projections (they depend on it)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import cast

from prometheus_client import CollectorRegistry

from spectral.consumer.handler import Handler
from spectral.errors import ConfigurationError
from spectral.settings import Settings

Factory = Callable[[Settings, str, CollectorRegistry], Handler]

DEPLOYMENTS: dict[str, str] = {
    "rule-candidates": "consumers.rule_candidates:build",
    "work-executor": "consumers.work_executor:build",
}


def factory(name: str) -> Factory:
    """The factory of deployment ``name``; a clear error lists the known ones."""
    target = DEPLOYMENTS.get(name)
    if target is None:
        known = ", ".join(sorted(DEPLOYMENTS))
        raise ConfigurationError(f"no consumer deployment named {name!r}; known: {known}")
    module_name, attribute = target.split(":")
    module = importlib.import_module(module_name)
    return cast("Factory", getattr(module, attribute))
