"""Consumer deployments by name: the registry type. The deployments themselves are declared by
plugins (spectral's built-in features among them, spectral/plugins.py); the engine names none.

A deployment is a factory ``build(settings, database_url, registry) -> Handler``, given as an
importable reference and imported only when its deployment runs. A factory does no I/O (no
connection, no thread, no file): spectral builds handlers to learn what they read (``offsets
reset``, ``maintenance``, the API, the AsyncAPI document) and closes them unused; background
work belongs in ``Handler.start``.

A deployment's name is its consumer's identity: lowercase letters, digits, ``.``, ``_`` and
``-``. Two deployments of one name are refused (a package can never replace a built-in one).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, cast

from prometheus_client import CollectorRegistry

from spectral.engine.handler import Handler
from spectral.errors import ConfigurationError
from spectral.plugins import DeploymentTarget
from spectral.settings import Settings

Factory = Callable[[Settings, str, CollectorRegistry], Handler[Any]]

_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")


class Deployments:
    """Named deployment factories; ``factory(name)`` imports the one asked for."""

    def __init__(self, targets: Iterable[DeploymentTarget]) -> None:
        self._targets: dict[str, DeploymentTarget] = {}
        for target in targets:
            if not _NAME.fullmatch(target.name):
                raise ConfigurationError(
                    f"consumer deployment name {target.name!r} ({target.target}) is refused: "
                    "lowercase letters, digits, '.', '_' and '-', at most 63"
                )
            seen = self._targets.get(target.name)
            if seen is not None and seen.target != target.target:
                raise ConfigurationError(
                    f"two consumer deployments are named {target.name!r}: "
                    f"{seen.target} and {target.target}"
                )
            self._targets[target.name] = target

    def names(self) -> list[str]:
        return sorted(self._targets)

    def is_own(self, name: str) -> bool:
        """Whether deployment ``name`` is one of spectral's built-in features'."""
        return self._target(name).own

    def _target(self, name: str) -> DeploymentTarget:
        target = self._targets.get(name)
        if target is None:
            known = ", ".join(self.names())
            raise ConfigurationError(f"no consumer deployment named {name!r}; known: {known}")
        return target

    def factory(self, name: str) -> Factory:
        """The factory of deployment ``name``; a clear error lists the known ones."""
        target = self._target(name)
        try:
            loaded = target.load()
        except ConfigurationError:
            raise
        except Exception as exc:  # whatever the package's import raises: name the deployment
            raise ConfigurationError(
                f"consumer deployment {name!r} ({target.target}) cannot be loaded: {exc}"
            ) from exc
        return cast("Factory", loaded)
