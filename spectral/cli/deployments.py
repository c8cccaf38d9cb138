"""The consumer deployments the CLI knows (``consume``, ``replay``, ``offsets reset``): the
built-in ones, plus any a package adds through the ``spectral.deployments`` entry-point group
(``name = "package.module:build"``)."""

from __future__ import annotations

from functools import cache
from importlib.metadata import entry_points

from spectral.consumer.deployments import GROUP, Deployments, Factory

BUILT_IN = {
    "rule-candidates": "consumers.rule_candidates:build",
    "work-executor": "consumers.work_executor:build",
}


@cache
def deployments() -> Deployments:
    return Deployments.of(BUILT_IN, entry_points(group=GROUP))


def factory(name: str) -> Factory:
    """The factory of deployment ``name`` (ConfigurationError naming the known ones)."""
    return deployments().factory(name)
