"""The consumer deployments the CLI knows (``consume``, ``replay``, ``offsets reset``,
``rebuild``, the API and MCP surfaces, ``maintenance``, the AsyncAPI document): those the
installed plugins declare — spectral's built-in features among them — and those of the
``spectral.deployments`` entry-point group.

A deployment's handler is also built (never run, then closed) to learn what it reads: a
factory does no I/O (spectral/engine/deployments.py). Who reads which event is known only so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from spectral.plugins import installed_deployment_targets

if TYPE_CHECKING:
    from spectral.engine.deployments import Deployments, Factory
    from spectral.engine.handler import Handler
    from spectral.settings import Settings


@cache
def deployments() -> Deployments:
    # The engine (Kafka client, database driver) loads once a deployment is asked for: a
    # command's --help and its usage errors do not pay for it.
    from spectral.engine.deployments import Deployments  # noqa: PLC0415

    return Deployments(installed_deployment_targets())


def factory(name: str) -> Factory:
    """The factory of deployment ``name`` (ConfigurationError naming the known ones)."""
    return deployments().factory(name)


def handler_factory(name: str, current: Settings) -> Callable[[str], Handler[Any]]:
    """``database_url -> Handler`` of deployment ``name``, each handler with a metrics registry
    of its own (what replays, rebuilds and dry runs build their handlers with)."""
    from prometheus_client import CollectorRegistry  # noqa: PLC0415 - see deployments()

    build = factory(name)
    return lambda database_url: build(current, database_url, CollectorRegistry())


@dataclass(frozen=True)
class Reads:
    """What one deployment reads."""

    deployment: str
    consumer: str
    """The handler's name: its dedup records, dead letters and default group carry it."""
    event_types: tuple[str, ...]
    database_role: str | None = None
    """The role its transactions take (SET ROLE), if any."""
    own: bool = False
    """One of spectral's built-in features' deployments."""

    def topics(self, prefix: str) -> tuple[str, ...]:
        from spectral.kafka.topics import topic_for  # noqa: PLC0415 - see deployments()

        return tuple(topic_for(t, prefix) for t in self.event_types)


async def reads_of(name: str, current: Settings, database_url: str) -> Reads:
    """What deployment ``name`` reads (its handler is built to ask, never run)."""
    from prometheus_client import CollectorRegistry  # noqa: PLC0415 - see deployments()

    handler = factory(name)(current, database_url, CollectorRegistry())
    await handler.close()
    return Reads(
        name,
        handler.name,
        tuple(handler.event_types),
        handler.database_role,
        deployments().is_own(name),
    )


async def what_each_reads(
    current: Settings, database_url: str, names: Sequence[str] | None = None
) -> list[Reads]:
    """:func:`reads_of` every deployment (or those of ``names``), by name."""
    return [
        await reads_of(name, current, database_url)
        for name in (deployments().names() if names is None else names)
    ]


def receivers(reads: Sequence[Reads], event_types: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Which deployments read each of ``event_types`` (the AsyncAPI receive operations)."""
    found: dict[str, list[str]] = {}
    for each in reads:
        for event_type in each.event_types:
            if event_type in event_types:
                found.setdefault(event_type, []).append(each.deployment)
    return {event_type: tuple(names) for event_type, names in found.items()}
