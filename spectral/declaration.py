"""What a plugin declares: one frozen :class:`Plugin`, found through the ``spectral.plugins``
entry-point group (``name = "package.plugin:PLUGIN"``).

A declaration names what the plugin contributes by **reference**, never by importing it:
``"module:attribute"`` strings that spectral imports only when it needs the thing (``spectral
--help`` imports no command; ``spectral consume NAME`` imports one deployment). A reference that
starts with ``.`` is relative to the package that declares the plugin (``".api:router"``,
``".:build"`` for the package itself), so a declaration never spells its own package's name.

This module imports nothing but the standard library: a plugin's declaration module imports it
(through :mod:`spectral.extend`) and stays as light.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

_DOTTED: Final = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
_MODULE: Final = re.compile(rf"\.(?:{_DOTTED})?|{_DOTTED}")
_REFERENCE: Final = re.compile(rf"(?:{_MODULE.pattern}):{_DOTTED}")
_COMMAND: Final = re.compile(r"[a-z][a-z0-9-]{0,31}")
_SCOPE: Final = re.compile(r"[a-z][a-z0-9_-]{0,30}:[a-z][a-z0-9_-]{0,30}")


def _check_reference(reference: str, what: str) -> None:
    if not _REFERENCE.fullmatch(reference):
        raise ValueError(
            f"{what} {reference!r} is not a reference: 'package.module:attribute', or "
            "'.module:attribute' relative to the declaring package ('.:attribute' for itself)"
        )


@dataclass(frozen=True, slots=True)
class Command:
    """``spectral NAME``: a command (group) of the plugin's own."""

    name: str
    help: str
    """One line: what ``spectral --help`` shows without importing the command."""
    target: str
    """A Typer app (a group) or a function (a command)."""

    def __post_init__(self) -> None:
        if not _COMMAND.fullmatch(self.name):
            raise ValueError(f"command name {self.name!r}: lowercase letters, digits and '-'")
        if not self.help.strip() or "\n" in self.help:
            raise ValueError(f"command {self.name!r}: its help is one line")
        _check_reference(self.target, f"command {self.name!r}: target")


@dataclass(frozen=True, slots=True)
class Deployment:
    """A consumer deployment: ``spectral consume NAME`` (and replay, rebuild, offsets, the
    operator surfaces) runs the handler its factory builds."""

    name: str
    factory: str
    """``build(settings, database_url, registry) -> Handler``; it does no I/O."""

    def __post_init__(self) -> None:
        _check_reference(self.factory, f"deployment {self.name!r}: factory")


@dataclass(frozen=True, slots=True)
class Router:
    """Routes of the HTTP API (``spectral api``)."""

    factory: str
    """``router(resources) -> fastapi.APIRouter``; every route checks its scope."""
    description: str = ""
    """A Markdown paragraph for the API's description (OpenAPI ``info.description``)."""

    def __post_init__(self) -> None:
        _check_reference(self.factory, "router factory")


@dataclass(frozen=True, slots=True)
class NavEntry:
    """A link in the web console's navigation bar."""

    key: str
    """The page's section (the link is marked current on it)."""
    label: str
    path: str
    """Below the console's prefix: ``/threads`` is ``/console/threads``."""
    order: int = 100
    """Links are shown by order, then label; the first one is the console's home page."""


@dataclass(frozen=True, slots=True)
class ConsolePage:
    """Pages of the web console."""

    factory: str
    """``router(console, resources) -> fastapi.APIRouter`` under the console's prefix."""
    templates: str | None = "."
    """The package whose ``templates/`` folder holds the pages' templates (``.``: the declaring
    package); None for none."""
    nav: tuple[NavEntry, ...] = ()

    def __post_init__(self) -> None:
        _check_reference(self.factory, "console page factory")


@dataclass(frozen=True, slots=True)
class Tools:
    """Tools of the MCP server (``spectral mcp``)."""

    register: str
    """``register(server, caller)``: adds the tools; each checks its scope through ``caller``."""
    instructions: str = ""
    """A sentence for the server's instructions to the agent: which tools, in which order."""

    def __post_init__(self) -> None:
        _check_reference(self.register, "tools register function")


@dataclass(frozen=True, slots=True)
class Scope:
    """A scope an API token can carry: ``area:verb``."""

    name: str
    description: str
    implies: tuple[str, ...] = ()
    """Scopes a token holding this one holds too."""

    def __post_init__(self) -> None:
        for name in (self.name, *self.implies):
            if not _SCOPE.fullmatch(name):
                raise ValueError(f"scope {name!r}: 'area:verb' in lowercase letters, '_', '-'")

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class Plugin:
    """Everything one plugin adds to spectral; every field is optional."""

    events: tuple[str, ...] = ()
    """References to an ``EventSpec`` or an iterable of them."""
    deployments: tuple[Deployment, ...] = ()
    migrations: str | None = None
    """The package holding the plugin's own migration track, ``NNNN_name.sql`` files
    (``".migrations"``); or a reference to a ``Traversable`` folder."""
    commands: tuple[Command, ...] = ()
    routers: tuple[Router, ...] = ()
    pages: tuple[ConsolePage, ...] = ()
    tools: tuple[Tools, ...] = ()
    scopes: tuple[Scope, ...] = ()
    settings: str | None = None
    """A settings class (``spectral.extend.PluginSettings``): its ``SPECTRAL_*`` variables are
    checked when spectral starts, and the plugin reads them with ``Class.of(settings)``."""
    retention: tuple[str, ...] = ()
    """References to functions ``tasks(settings) -> Iterable[RetentionTask]``: the tables the
    plugin's traffic grows, pruned behind their horizons by ``spectral maintenance`` (a table
    kept by design is measured: ``Measured``)."""

    def __post_init__(self) -> None:
        for reference in self.events:
            _check_reference(reference, "event specs")
        for reference in self.retention:
            _check_reference(reference, "retention tasks")
        if self.settings is not None:
            _check_reference(self.settings, "settings class")
        if self.migrations is not None and not (
            _MODULE.fullmatch(self.migrations) or _REFERENCE.fullmatch(self.migrations)
        ):
            raise ValueError(f"migrations {self.migrations!r}: a package, or a reference")


__all__ = [
    "Command",
    "ConsolePage",
    "Deployment",
    "NavEntry",
    "Plugin",
    "Router",
    "Scope",
    "Tools",
]
