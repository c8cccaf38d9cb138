"""Plugins: what other teams' packages add to spectral through entry points.

A package extends spectral without changing it by declaring entry points in three groups:

``spectral.events``       ``name = "package.module:SPECS"``: an :class:`~contracts.EventSpec`
                          or an iterable of them. Their event types join spectral's registry
                          for every command: the consumer engine decodes them, the outbox
                          encodes them, ``topics plan|apply`` declares their topics,
                          ``contracts check`` and ``dlq show`` read them, ``contracts export
                          --plugin NAME`` writes their JSON Schemas and AsyncAPI document.
``spectral.deployments``  ``name = "package.module:build"``: a consumer deployment's factory
                          (spectral/engine/deployments.py); ``consume``, ``replay``,
                          ``offsets reset`` and ``rebuild`` run it by name.
``spectral.migrations``   ``name = "package.migrations"``: a package (or a
                          :class:`~importlib.resources.abc.Traversable`) holding
                          ``NNNN_name.sql`` files: the plugin's own migration track, applied by
                          ``spectral db migrate`` after spectral's (spectral/db/migrate.py).

The rules that keep spectral's own definitions spectral's:

* a plugin's event type is a lowercase dotted name of at least two parts, at most
  :data:`MAX_EVENT_TYPE_CHARS` characters (a topic name under any sensible prefix); it never
  ends in ``.dlq`` (that is a dead-letter topic), never lies in a namespace of spectral's own
  event types (``platform.``, ``work.``: spectral may add types there) and is registered once
  across spectral and every plugin;
* a plugin name (the entry point's name) is lowercase, at most 63 characters, and never
  ``spectral``; a migration track never points at spectral's own migrations;
* whatever fails to load is a :class:`~spectral.errors.ConfigurationError` naming the plugin and
  its entry point: an installation with a broken plugin refuses to run rather than dead-letter
  that plugin's records as unknown.

Discovery reads package metadata once per process (``installed_*``, cached); the pure functions
below take the entry points as arguments, so tests give their own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources as importlib_resources
from importlib.metadata import EntryPoint, entry_points
from importlib.resources.abc import Traversable
from pathlib import Path
from types import ModuleType
from typing import Any, Final

from contracts import DEFAULT_REGISTRY, EventRegistry, EventSpec
from spectral import resources
from spectral.errors import ConfigurationError

EVENTS_GROUP: Final = "spectral.events"
DEPLOYMENTS_GROUP: Final = "spectral.deployments"
MIGRATIONS_GROUP: Final = "spectral.migrations"

SPECTRAL: Final = "spectral"
"""The name of spectral's own track and events; no plugin may take it."""
MAX_EVENT_TYPE_CHARS: Final = 200
"""Kafka allows 249 characters a topic name: room for a prefix and the ``.dlq`` suffix."""

_PLUGIN_NAME: Final = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")
_EVENT_TYPE: Final = re.compile(r"[a-z0-9][a-z0-9_-]*(?:\.[a-z0-9][a-z0-9_-]*)+")
_DLQ_SUFFIX: Final = ".dlq"


@dataclass(frozen=True)
class EventSource:
    """The event specs one plugin registers."""

    plugin: str
    specs: tuple[EventSpec[Any], ...]


@dataclass(frozen=True)
class MigrationTrack:
    """One plugin's migrations: a folder of ``NNNN_name.sql`` files, numbered on their own."""

    plugin: str
    directory: Traversable


def _where(entry: EntryPoint) -> str:
    dist = entry.dist.name if entry.dist is not None else "an unnamed package"
    return f"{entry.group}: {entry.name} = {entry.value} in {dist}"


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


def event_sources(entries: Iterable[EntryPoint]) -> tuple[EventSource, ...]:
    """The specs of each ``spectral.events`` entry point, loaded and checked for shape."""
    out: list[EventSource] = []
    for entry in _unique(entries):
        plugin = _check_plugin_name(entry)
        loaded = _load(entry)
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
                    f"plugin {plugin!r} ({_where(entry)}) gives {type(item).__name__}, not an "
                    "EventSpec (or an iterable of them)"
                )
            specs.append(item)
        if not specs:
            raise ConfigurationError(f"plugin {plugin!r} ({_where(entry)}) registers no event")
        out.append(EventSource(plugin, tuple(specs)))
    return tuple(out)


def _check_event_type(plugin: str, spec: EventSpec[Any], reserved: set[str]) -> None:
    event_type = spec.event_type
    problem = None
    if len(event_type) > MAX_EVENT_TYPE_CHARS or not _EVENT_TYPE.fullmatch(event_type):
        problem = (
            "an event type is a lowercase dotted name of at least two parts ([a-z0-9_-]), at "
            f"most {MAX_EVENT_TYPE_CHARS} characters: it names a Kafka topic"
        )
    elif event_type.endswith(_DLQ_SUFFIX):
        problem = f"names ending in {_DLQ_SUFFIX!r} are dead-letter topics"
    elif event_type.split(".", 1)[0] in reserved:
        namespaces = ", ".join(f"{n}." for n in sorted(reserved))
        problem = f"the namespaces {namespaces} are spectral's own"
    elif spec.schema_version < 1:
        problem = "schema_version starts at 1"
    if problem is not None:
        raise ConfigurationError(f"plugin {plugin!r} registers {event_type!r}: {problem}")


def registry_of(sources: Iterable[EventSource]) -> EventRegistry:
    """spectral's event types plus those of ``sources``; a type registered twice is refused,
    naming both owners (a plugin never replaces spectral's types or another plugin's)."""
    specs = list(DEFAULT_REGISTRY.specs())
    owner = dict.fromkeys((spec.event_type for spec in specs), SPECTRAL)
    reserved = {event_type.split(".", 1)[0] for event_type in owner}
    for source in sources:
        for spec in source.specs:
            _check_event_type(source.plugin, spec, reserved)
            if spec.event_type in owner:
                raise ConfigurationError(
                    f"plugin {source.plugin!r} registers {spec.event_type!r}, which "
                    f"{owner[spec.event_type]!r} registers already"
                )
            owner[spec.event_type] = source.plugin
            specs.append(spec)
    return EventRegistry(specs)


def migration_tracks(entries: Iterable[EntryPoint]) -> tuple[MigrationTrack, ...]:
    """The folder of each ``spectral.migrations`` entry point, by plugin name."""
    own = resources.migrations()
    out: list[MigrationTrack] = []
    for entry in _unique(entries):
        plugin = _check_plugin_name(entry)
        loaded = _load(entry)
        directory: Traversable
        if isinstance(loaded, ModuleType):
            directory = importlib_resources.files(loaded)
        elif isinstance(loaded, Traversable):
            directory = loaded
        else:
            raise ConfigurationError(
                f"plugin {plugin!r} ({_where(entry)}) gives {type(loaded).__name__}: a "
                "migration track is a package (or a Traversable) holding NNNN_name.sql files"
            )
        if _same_place(directory, own) or (
            isinstance(loaded, ModuleType) and loaded.__name__.startswith(resources.SCHEMAS_PACKAGE)
        ):
            raise ConfigurationError(
                f"plugin {plugin!r} ({_where(entry)}) points at spectral's own migrations"
            )
        out.append(MigrationTrack(plugin, directory))
    return tuple(out)


def _same_place(one: Traversable, other: Traversable) -> bool:
    if isinstance(one, Path) and isinstance(other, Path):
        return one.resolve() == other.resolve()
    return str(one) == str(other)


@cache
def installed_entries(group: str) -> tuple[EntryPoint, ...]:
    """The installed packages' entry points of ``group`` (read once per process)."""
    return tuple(entry_points(group=group))


@cache
def installed_event_sources() -> tuple[EventSource, ...]:
    return event_sources(installed_entries(EVENTS_GROUP))


@cache
def installed_registry() -> EventRegistry:
    """spectral's event types and those of every installed plugin: what the engine decodes,
    the outbox encodes and ``topics`` declares."""
    return registry_of(installed_event_sources())


@cache
def installed_migration_tracks() -> tuple[MigrationTrack, ...]:
    return migration_tracks(installed_entries(MIGRATIONS_GROUP))


__all__ = [
    "DEPLOYMENTS_GROUP",
    "EVENTS_GROUP",
    "MIGRATIONS_GROUP",
    "SPECTRAL",
    "EventSource",
    "MigrationTrack",
    "event_sources",
    "installed_entries",
    "installed_event_sources",
    "installed_migration_tracks",
    "installed_registry",
    "migration_tracks",
    "registry_of",
]
