"""Plugins: what packages add to spectral through entry points — spectral's own features too.

A package declares one entry point in the group ``spectral.plugins``::

    [project.entry-points."spectral.plugins"]
    deploy-tracker = "deploy_tracker.plugin:PLUGIN"

where ``PLUGIN`` is a :class:`~spectral.declaration.Plugin`: its events, consumer deployments,
migration track, CLI commands, HTTP routers, console pages, MCP tools, token scopes and settings,
each by a lazy reference (spectral/declaration.py). spectral's built-in features (failure
clusters, the triage inbox, durable work and its executor) are declared the same way, in
spectral's own distribution. The three groups of the first plugin API keep working:

``spectral.events``       ``name = "package.module:SPECS"``: an ``EventSpec`` or an iterable;
``spectral.deployments``  ``name = "package.module:build"``: a deployment's factory;
``spectral.migrations``   ``name = "package.migrations"``: a package of ``NNNN_name.sql`` files.

The rules that keep definitions apart:

* an event type is a lowercase dotted name of at least two parts, at most
  :data:`MAX_EVENT_TYPE_CHARS` characters; it never ends in ``.dlq`` (a dead-letter topic), is
  registered once, and never lies in a namespace of spectral's own event types (the namespaces
  the plugins of spectral's own distribution register: ``platform.``, ``work.``);
* a plugin name (the entry point's name) is lowercase, at most 63 characters, and never
  ``spectral``; a migration track never points at spectral's own migrations; a command, a
  deployment or a scope is declared once across spectral and every plugin;
* whatever fails to load is a :class:`~spectral.errors.ConfigurationError` naming the plugin and
  its entry point: an installation with a broken plugin refuses to run rather than dead-letter
  that plugin's records as unknown.

Discovery reads package metadata once per process (``installed_*``, cached) and imports only the
declarations, which import nothing heavy; the pure functions below take the entry points as
arguments, so tests give their own.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources as importlib_resources
from importlib.metadata import EntryPoint, entry_points
from importlib.resources.abc import Traversable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

from spectral import resources
from spectral.declaration import Plugin, Scope
from spectral.errors import ConfigurationError

if TYPE_CHECKING:
    from contracts import EventRegistry, EventSpec

PLUGINS_GROUP: Final = "spectral.plugins"
EVENTS_GROUP: Final = "spectral.events"
DEPLOYMENTS_GROUP: Final = "spectral.deployments"
MIGRATIONS_GROUP: Final = "spectral.migrations"

SPECTRAL: Final = "spectral"
"""The name of spectral's distribution, its own track and events; no plugin may take it."""
MAX_EVENT_TYPE_CHARS: Final = 200
"""Kafka allows 249 characters a topic name: room for a prefix and the ``.dlq`` suffix."""

_PLUGIN_NAME: Final = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")
_EVENT_TYPE: Final = re.compile(r"[a-z0-9][a-z0-9_-]*(?:\.[a-z0-9][a-z0-9_-]*)+")


def _where(entry: EntryPoint) -> str:
    dist = entry.dist.name if entry.dist is not None else "an unnamed package"
    return f"{entry.group}: {entry.name} = {entry.value} in {dist}"


def _is_own(entry: EntryPoint) -> bool:
    return entry.dist is not None and entry.dist.name == SPECTRAL


def _check_plugin_name(entry: EntryPoint) -> str:
    if entry.name == SPECTRAL or not _PLUGIN_NAME.fullmatch(entry.name):
        raise ConfigurationError(
            f"plugin name {entry.name!r} ({_where(entry)}) is refused: a plugin is named in "
            f"lowercase letters, digits, '.', '_' and '-' (at most 63), and never {SPECTRAL!r}"
        )
    return entry.name


def _load(entry: EntryPoint) -> Any:
    try:
        return entry.load()
    except Exception as exc:
        raise ConfigurationError(
            f"plugin {entry.name!r} cannot be loaded ({_where(entry)}): {type(exc).__name__}: {exc}"
        ) from exc


def _unique(entries: Iterable[EntryPoint]) -> list[EntryPoint]:
    """The entry points by name; one name declared twice with different targets is refused."""
    by_name: dict[str, EntryPoint] = {}
    for entry in entries:
        seen = by_name.get(entry.name)
        if seen is not None and seen.value != entry.value:
            raise ConfigurationError(
                f"two plugins are named {entry.name!r} in {entry.group}: "
                f"{_where(seen)} and {_where(entry)}"
            )
        by_name[entry.name] = entry
    return [by_name[name] for name in sorted(by_name)]


# -- the plugin declarations -----------------------------------------------------------------


@dataclass(frozen=True)
class InstalledPlugin:
    """One plugin's declaration, where it comes from, and how its references resolve."""

    name: str
    declaration: Plugin
    package: str
    """The package that declares the plugin: ``.``-references are relative to it."""
    own: bool = False
    """Declared by spectral's own distribution (its built-in features)."""
    where: str = ""

    def module_name(self, module: str) -> str:
        """``module`` made absolute (``.api`` -> ``pkg.api``, ``.`` -> ``pkg``)."""
        return importlib.util.resolve_name(module, self.package) if module[:1] == "." else module

    def absolute(self, reference: str) -> str:
        """``reference`` with its module made absolute (``.api:router`` -> ``pkg.api:router``)."""
        module, sep, attribute = reference.partition(":")
        return f"{self.module_name(module)}{sep}{attribute}"

    def load(self, reference: str, what: str) -> Any:
        """Import what ``reference`` names (a module when it has no ``:attribute``)."""
        module_name, _, attribute = self.absolute(reference).partition(":")
        try:
            found: Any = importlib.import_module(module_name)
            for part in filter(None, attribute.split(".")):
                found = getattr(found, part)
        except Exception as exc:
            raise ConfigurationError(
                f"plugin {self.name!r} ({self.where}): its {what} {reference!r} cannot be "
                f"loaded: {type(exc).__name__}: {exc}"
            ) from exc
        return found


def plugins_of(entries: Iterable[EntryPoint]) -> tuple[InstalledPlugin, ...]:
    """The :class:`~spectral.declaration.Plugin` of each ``spectral.plugins`` entry point."""
    out = []
    for entry in _unique(entries):
        name = _check_plugin_name(entry)
        declaration = _load(entry)
        if not isinstance(declaration, Plugin):
            raise ConfigurationError(
                f"plugin {name!r} ({_where(entry)}) gives {type(declaration).__name__}, not a "
                "spectral.extend.Plugin"
            )
        module = sys.modules[entry.module]
        package = module.__package__ or entry.module.rpartition(".")[0]
        out.append(InstalledPlugin(name, declaration, package, _is_own(entry), _where(entry)))
    return tuple(out)


@cache
def installed_entries(group: str) -> tuple[EntryPoint, ...]:
    """The installed packages' entry points of ``group`` (read once per process)."""
    return tuple(entry_points(group=group))


@cache
def installed_plugins() -> tuple[InstalledPlugin, ...]:
    """Every installed plugin's declaration, by name (spectral's built-ins among them)."""
    return plugins_of(installed_entries(PLUGINS_GROUP))


def _once(kind: str, named: Iterable[tuple[str, str]]) -> None:
    """Refuse a ``kind`` name declared by two plugins (``named``: (name, plugin) pairs)."""
    owner: dict[str, str] = {}
    for name, plugin in named:
        if name in owner:
            raise ConfigurationError(
                f"the {kind} {name!r} is declared twice: by {owner[name]!r} and by {plugin!r}"
            )
        owner[name] = plugin


def scopes_of(plugins: Iterable[InstalledPlugin]) -> tuple[Scope, ...]:
    """The scopes the plugins declare (each once)."""
    declared = [(scope, plugin.name) for plugin in plugins for scope in plugin.declaration.scopes]
    _once("scope", ((scope.name, plugin) for scope, plugin in declared))
    return tuple(scope for scope, _ in declared)


def settings_classes() -> tuple[type[Any], ...]:
    """The settings class of every installed plugin that declares one."""
    return tuple(
        plugin.load(plugin.declaration.settings, "settings class")
        for plugin in installed_plugins()
        if plugin.declaration.settings is not None
    )


# -- events ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EventSource:
    """The event specs one plugin registers."""

    plugin: str
    specs: tuple[EventSpec[Any], ...]
    own: bool = False
    """Registered by spectral's own distribution: its namespaces are reserved."""


def _specs(plugin: str, where: str, loaded: object) -> list[EventSpec[Any]]:
    from contracts import EventSpec  # noqa: PLC0415 - pydantic only once events are asked for

    found: Sequence[object]
    if isinstance(loaded, EventSpec):
        found = [loaded]
    elif isinstance(loaded, Iterable) and not isinstance(loaded, str | bytes):
        found = list(loaded)
    else:
        found = [loaded]
    specs: list[EventSpec[Any]] = []
    for item in found:
        if not isinstance(item, EventSpec):
            raise ConfigurationError(
                f"plugin {plugin!r} ({where}) gives {type(item).__name__}, not an EventSpec "
                "(or an iterable of them)"
            )
        specs.append(item)
    return specs


def event_sources(entries: Iterable[EntryPoint]) -> tuple[EventSource, ...]:
    """The specs of each ``spectral.events`` entry point, loaded and checked for shape."""
    out: list[EventSource] = []
    for entry in _unique(entries):
        plugin = _check_plugin_name(entry)
        specs = _specs(plugin, _where(entry), _load(entry))
        if not specs:
            raise ConfigurationError(f"plugin {plugin!r} ({_where(entry)}) registers no event")
        out.append(EventSource(plugin, tuple(specs), _is_own(entry)))
    return tuple(out)


def plugin_event_sources(plugins: Iterable[InstalledPlugin]) -> tuple[EventSource, ...]:
    """The specs the plugins' declarations name."""
    out = []
    for plugin in plugins:
        specs = [
            spec
            for reference in plugin.declaration.events
            for spec in _specs(plugin.name, plugin.where, plugin.load(reference, "events"))
        ]
        if specs:
            out.append(EventSource(plugin.name, tuple(specs), plugin.own))
    return tuple(out)


def _check_event_type(plugin: str, spec: EventSpec[Any], reserved: set[str]) -> None:
    from contracts.dead_letters import DLQ_SUFFIX  # noqa: PLC0415 - with the registry's import

    event_type = spec.event_type
    problem = None
    if len(event_type) > MAX_EVENT_TYPE_CHARS or not _EVENT_TYPE.fullmatch(event_type):
        problem = (
            "an event type is a lowercase dotted name of at least two parts ([a-z0-9_-]), at "
            f"most {MAX_EVENT_TYPE_CHARS} characters: it names a Kafka topic"
        )
    elif event_type.endswith(DLQ_SUFFIX):
        problem = f"names ending in {DLQ_SUFFIX!r} are dead-letter topics"
    elif event_type.split(".", 1)[0] in reserved:
        namespaces = ", ".join(f"{n}." for n in sorted(reserved))
        problem = f"the namespaces {namespaces} are spectral's own"
    elif spec.schema_version < 1:
        problem = "schema_version starts at 1"
    if problem is not None:
        raise ConfigurationError(f"plugin {plugin!r} registers {event_type!r}: {problem}")


def registry_of(sources: Iterable[EventSource]) -> EventRegistry:
    """The event types of ``sources``: a type registered twice is refused, naming both owners,
    and no plugin outside spectral's own distribution registers in spectral's namespaces."""
    from contracts import EventRegistry  # noqa: PLC0415 - pydantic only once events are asked for

    sources = sorted(sources, key=lambda source: not source.own)  # spectral's own first
    reserved = {
        spec.event_type.split(".", 1)[0]
        for source in sources
        if source.own
        for spec in source.specs
    }
    owner: dict[str, str] = {}
    specs: list[EventSpec[Any]] = []
    for source in sources:
        for spec in source.specs:
            _check_event_type(source.plugin, spec, set() if source.own else reserved)
            if spec.event_type in owner:
                raise ConfigurationError(
                    f"plugin {source.plugin!r} registers {spec.event_type!r}, which "
                    f"{owner[spec.event_type]!r} registers already"
                )
            owner[spec.event_type] = source.plugin
            specs.append(spec)
    return EventRegistry(specs)


@cache
def installed_event_sources() -> tuple[EventSource, ...]:
    """The event specs of every installed plugin, declared or in ``spectral.events``."""
    return (
        *plugin_event_sources(installed_plugins()),
        *event_sources(installed_entries(EVENTS_GROUP)),
    )


@cache
def installed_registry() -> EventRegistry:
    """The event types of spectral's built-ins and of every installed plugin: what the engine
    decodes, the outbox encodes and ``topics`` declares."""
    return registry_of(installed_event_sources())


# -- deployments -------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeploymentTarget:
    """A consumer deployment: its name, where it is declared, and how to import its factory."""

    name: str
    plugin: str
    target: str
    load: Callable[[], Any]
    own: bool = False


def deployment_targets(
    plugins: Iterable[InstalledPlugin], entries: Iterable[EntryPoint] = ()
) -> tuple[DeploymentTarget, ...]:
    """The deployments the plugins declare, and those of ``spectral.deployments`` entry points."""

    def declared() -> Iterator[DeploymentTarget]:
        for plugin in plugins:
            for deployment in plugin.declaration.deployments:

                def load(
                    plugin: InstalledPlugin = plugin, reference: str = deployment.factory
                ) -> Any:
                    return plugin.load(reference, "deployment factory")

                target = plugin.absolute(deployment.factory)
                yield DeploymentTarget(deployment.name, plugin.name, target, load, plugin.own)
        for entry in entries:
            yield DeploymentTarget(entry.name, entry.name, entry.value, entry.load, _is_own(entry))

    return tuple(declared())


@cache
def installed_deployment_targets() -> tuple[DeploymentTarget, ...]:
    return deployment_targets(installed_plugins(), installed_entries(DEPLOYMENTS_GROUP))


# -- migrations ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class MigrationTrack:
    """One plugin's migrations: a folder of ``NNNN_name.sql`` files, numbered on their own."""

    plugin: str
    directory: Traversable


def _track(plugin: str, where: str, loaded: object) -> MigrationTrack:
    own = resources.migrations()
    directory: Traversable
    if isinstance(loaded, ModuleType):
        directory = importlib_resources.files(loaded)
    elif isinstance(loaded, Traversable):
        directory = loaded
    else:
        raise ConfigurationError(
            f"plugin {plugin!r} ({where}) gives {type(loaded).__name__}: a migration track is "
            "a package (or a Traversable) holding NNNN_name.sql files"
        )
    if _same_place(directory, own) or (
        isinstance(loaded, ModuleType) and loaded.__name__.startswith(resources.SCHEMAS_PACKAGE)
    ):
        raise ConfigurationError(f"plugin {plugin!r} ({where}) points at spectral's own migrations")
    return MigrationTrack(plugin, directory)


def migration_tracks(
    entries: Iterable[EntryPoint], plugins: Iterable[InstalledPlugin] = ()
) -> tuple[MigrationTrack, ...]:
    """The folder of each ``spectral.migrations`` entry point and of each plugin that declares
    one, by plugin name."""
    out = [
        _track(_check_plugin_name(entry), _where(entry), _load(entry)) for entry in _unique(entries)
    ]
    out += [
        _track(plugin.name, plugin.where, plugin.load(plugin.declaration.migrations, "migrations"))
        for plugin in plugins
        if plugin.declaration.migrations is not None
    ]
    _once("migration track", ((track.plugin, track.plugin) for track in out))
    return tuple(sorted(out, key=lambda track: track.plugin))


def _same_place(one: Traversable, other: Traversable) -> bool:
    if isinstance(one, Path) and isinstance(other, Path):
        return one.resolve() == other.resolve()
    return str(one) == str(other)


@cache
def installed_migration_tracks() -> tuple[MigrationTrack, ...]:
    return migration_tracks(installed_entries(MIGRATIONS_GROUP), installed_plugins())


__all__ = [
    "DEPLOYMENTS_GROUP",
    "EVENTS_GROUP",
    "MIGRATIONS_GROUP",
    "PLUGINS_GROUP",
    "SPECTRAL",
    "DeploymentTarget",
    "EventSource",
    "InstalledPlugin",
    "MigrationTrack",
    "deployment_targets",
    "event_sources",
    "installed_deployment_targets",
    "installed_entries",
    "installed_event_sources",
    "installed_migration_tracks",
    "installed_plugins",
    "installed_registry",
    "migration_tracks",
    "plugin_event_sources",
    "plugins_of",
    "registry_of",
    "scopes_of",
    "settings_classes",
]
