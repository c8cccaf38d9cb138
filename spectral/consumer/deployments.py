"""Consumer deployments by name: the registry type. The concrete deployments are wired by the
composition root (spectral/cli/deployments.py: the built-in ones and those of the
``spectral.deployments`` entry-point group); the engine names none of them.

A deployment is a factory ``build(settings, database_url, registry) -> Handler``, given as an
importable ``module:attribute`` and imported only when its deployment runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import EntryPoint
from typing import Any, cast

from prometheus_client import CollectorRegistry

from spectral.consumer.handler import Handler
from spectral.errors import ConfigurationError
from spectral.settings import Settings

Factory = Callable[[Settings, str, CollectorRegistry], Handler[Any]]

GROUP = "spectral.deployments"
"""The entry-point group through which a package adds deployments."""


class Deployments:
    """Named deployment factories; ``factory(name)`` imports the one asked for."""

    def __init__(self, entries: Iterable[EntryPoint]) -> None:
        self._entries: dict[str, EntryPoint] = {}
        for entry in entries:
            if entry.name in self._entries and self._entries[entry.name].value != entry.value:
                raise ConfigurationError(
                    f"two consumer deployments are named {entry.name!r}: "
                    f"{self._entries[entry.name].value} and {entry.value}"
                )
            self._entries[entry.name] = entry

    @classmethod
    def of(cls, targets: Mapping[str, str], extra: Iterable[EntryPoint] = ()) -> Deployments:
        """``targets`` (name -> ``module:attribute``) plus ``extra`` entry points."""
        built_in = [EntryPoint(name, target, GROUP) for name, target in targets.items()]
        return cls([*built_in, *extra])

    def names(self) -> list[str]:
        return sorted(self._entries)

    def factory(self, name: str) -> Factory:
        """The factory of deployment ``name``; a clear error lists the known ones."""
        entry = self._entries.get(name)
        if entry is None:
            known = ", ".join(self.names())
            raise ConfigurationError(f"no consumer deployment named {name!r}; known: {known}")
        try:
            loaded = entry.load()
        except (ImportError, AttributeError) as exc:
            raise ConfigurationError(
                f"consumer deployment {name!r} ({entry.value}) cannot be loaded: {exc}"
            ) from exc
        return cast("Factory", loaded)
