"""The scopes a token can carry and what each allows (pure: no I/O).

The framework's own scopes guard the operations surfaces::

    ops:read       consumer lag and progress, dead letters, redrive and replay dry runs
    ops:redrive    really redrive dead letters (implies ops:read)

Every other scope is declared by a plugin (``Plugin(scopes=...)``: spectral's built-in features
declare ``work:*`` and ``triage:*``). A token is made only with registered scopes; the database
checks only their shape (``area:verb``), so installing a plugin needs no migration. A stored
scope nobody registers any more (its plugin was removed) allows nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache
from typing import Final

from spectral.declaration import Scope
from spectral.errors import ConfigurationError
from spectral.plugins import installed_plugins, scopes_of

OPS_READ: Final = Scope(
    "ops:read", "consumer lag and progress, dead letters, redrive and replay dry runs"
)
OPS_REDRIVE: Final = Scope("ops:redrive", "really redrive dead letters", implies=(OPS_READ.name,))
FRAMEWORK_SCOPES: Final = (OPS_READ, OPS_REDRIVE)


class Vocabulary:
    """The registered scopes: what a token may be made with, and what each one implies."""

    def __init__(self, scopes: Iterable[Scope]) -> None:
        self.scopes: tuple[Scope, ...] = tuple(scopes)
        self._by_name = {scope.name: scope for scope in self.scopes}
        if len(self._by_name) != len(self.scopes):
            names = [scope.name for scope in self.scopes]
            twice = sorted({name for name in names if names.count(name) > 1})
            raise ConfigurationError(f"scopes declared twice: {', '.join(twice)}")
        for scope in self.scopes:
            unknown = [name for name in scope.implies if name not in self._by_name]
            if unknown:
                raise ConfigurationError(
                    f"scope {scope.name!r} implies {', '.join(unknown)}, which nobody declares"
                )

    def names(self) -> list[str]:
        return sorted(self._by_name)

    def effective(self, granted: Iterable[str]) -> frozenset[str]:
        """The registered scopes among ``granted``, plus those they imply (transitively)."""
        out: set[str] = set()
        todo = [name for name in granted if name in self._by_name]
        while todo:
            name = todo.pop()
            if name not in out:
                out.add(name)
                todo.extend(self._by_name[name].implies)
        return frozenset(out)

    def parse(self, values: Iterable[str]) -> tuple[str, ...]:
        """Scope names (sorted, without duplicates); ValueError naming the valid ones."""
        found: set[str] = set()
        for value in values:
            name = value.strip()
            if name not in self._by_name:
                raise ValueError(
                    f"unknown scope {value!r}; expected one of: {', '.join(self.names())}"
                )
            found.add(name)
        if not found:
            raise ValueError("a token needs at least one scope")
        return tuple(sorted(found))

    def describe(self) -> Sequence[str]:
        """One line per scope: its name, what it allows, what it implies."""
        return [
            f"{scope.name}: {scope.description}"
            + (f" (implies {', '.join(scope.implies)})" if scope.implies else "")
            for scope in sorted(self.scopes, key=lambda s: s.name)
        ]


@cache
def installed_vocabulary() -> Vocabulary:
    """The framework's scopes and those of every installed plugin."""
    return Vocabulary((*FRAMEWORK_SCOPES, *scopes_of(installed_plugins())))
