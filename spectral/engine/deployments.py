"""Consumer deployments by name: the registry type. The concrete deployments are wired by the
composition root (spectral/cli/deployments.py: the built-in ones and those of the
``spectral.deployments`` entry-point group); the engine names none of them.

A deployment is a factory ``build(settings, database_url, registry) -> Handler``, given as an
importable ``module:attribute`` and imported only when its deployment runs. A factory does no
I/O (no connection, no thread, no file): spectral builds handlers to learn what they read
(``offsets reset``, ``maintenance``, the API) and closes them unused; background work belongs in
``Handler.start``.

A deployment's name is its consumer's identity: lowercase letters, digits, ``.``, ``_`` and
``-``. Two deployments of one name are refused (a package can never replace a built-in one).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import EntryPoint
from typing import Any, cast

from prometheus_client import CollectorRegistry

from spectral.engine.handler import Handler
from spectral.errors import ConfigurationError
from spectral.plugins import DEPLOYMENTS_GROUP
from spectral.settings import Settings

Factory = Callable[[Settings, str, CollectorRegistry], Handler[Any]]

_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")


class Deployments:
    """Named deployment factories; ``factory(name)`` imports the one asked for."""

    def __init__(self, entries: Iterable[EntryPoint]) -> None:
        self._entries: dict[str, EntryPoint] = {}
        for entry in entries:
            if not _NAME.fullmatch(entry.name):
                raise ConfigurationError(
                    f"consumer deployment name {entry.name!r} ({entry.value}) is refused: "
                    "lowercase letters, digits, '.', '_' and '-', at most 63"
                )
            if entry.name in self._entries and self._entries[entry.name].value != entry.value:
                raise ConfigurationError(
                    f"two consumer deployments are named {entry.name!r}: "
                    f"{self._entries[entry.name].value} and {entry.value}"
                )
            self._entries[entry.name] = entry

    @classmethod
    def of(cls, targets: Mapping[str, str], extra: Iterable[EntryPoint] = ()) -> Deployments:
        """``targets`` (name -> ``module:attribute``) plus ``extra`` entry points."""
        built_in = [EntryPoint(name, target, DEPLOYMENTS_GROUP) for name, target in targets.items()]
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
        except Exception as exc:  # whatever the package's import raises: name the deployment
            raise ConfigurationError(
                f"consumer deployment {name!r} ({entry.value}) cannot be loaded: {exc}"
            ) from exc
        return cast("Factory", loaded)
