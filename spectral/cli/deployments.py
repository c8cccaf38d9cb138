"""The consumer deployments the CLI knows (``consume``, ``replay``, ``offsets reset``,
``rebuild``, the API and MCP surfaces, ``maintenance``): the built-in ones, plus any a package
adds through the ``spectral.deployments`` entry-point group (``name = "package.module:build"``).

A deployment's handler is also built (never run, then closed) to learn what it reads: a
factory does no I/O (spectral/engine/deployments.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from prometheus_client import CollectorRegistry

from spectral.engine.deployments import Deployments, Factory
from spectral.kafka.topics import topic_for
from spectral.plugins import DEPLOYMENTS_GROUP, installed_entries
from spectral.settings import Settings

BUILT_IN = {
    "rule-candidates": "consumers.rule_candidates:build",
    "work-executor": "consumers.work_executor:build",
}


@cache
def deployments() -> Deployments:
    return Deployments.of(BUILT_IN, installed_entries(DEPLOYMENTS_GROUP))


def factory(name: str) -> Factory:
    """The factory of deployment ``name`` (ConfigurationError naming the known ones)."""
    return deployments().factory(name)


@dataclass(frozen=True)
class Reads:
    """What one deployment reads."""

    deployment: str
    consumer: str
    """The handler's name: its dedup records, dead letters and default group carry it."""
    event_types: tuple[str, ...]
    database_role: str | None = None
    """The role its transactions take (SET ROLE), if any."""

    def topics(self, prefix: str) -> tuple[str, ...]:
        return tuple(topic_for(t, prefix) for t in self.event_types)


async def reads_of(name: str, current: Settings, database_url: str) -> Reads:
    """What deployment ``name`` reads (its handler is built to ask, never run)."""
    handler = factory(name)(current, database_url, CollectorRegistry())
    await handler.close()
    return Reads(name, handler.name, tuple(handler.event_types), handler.database_role)


async def what_each_reads(
    current: Settings, database_url: str, names: Sequence[str] | None = None
) -> list[Reads]:
    """:func:`reads_of` every deployment (or those of ``names``), by name."""
    return [
        await reads_of(name, current, database_url)
        for name in (deployments().names() if names is None else names)
    ]
