"""The extension API: everything a plugin package needs, in one module.

The guide: docs/howto/extend/write-a-plugin.md.

What is imported from here is **stable**: within one ``EXTENSION_API_VERSION`` major number a
name is never removed or renamed and a signature only gains optional parameters; a change that
breaks a plugin raises the major number. Everything else in spectral — every other module, and
any member whose name starts with ``_`` — is **internal** and may change in any release, even
if a plugin can import it. ``spectral.testing`` (the pytest plugin) follows the same version.

A plugin declares itself with one :class:`Plugin` in the ``spectral.plugins`` entry-point group
(spectral/declaration.py says what each field takes). The declaration types are imported at
once and are light; every other name is imported when first used, so a declaration module that
imports from here keeps ``spectral --help`` fast.

The plugin's side of the contract (checked when spectral loads it):

* an event type is a lowercase dotted name in the plugin's own namespace (``platform.`` and
  ``work.`` are spectral's), at most 200 characters, registered once;
* a deployment factory ``build(settings, database_url, registry) -> Handler`` does no I/O;
* a migration track is a package of ``NNNN_name.sql`` files, numbered from 0001 without gaps,
  append-only (a changed file is refused), that never changes spectral's objects;
* a command, a deployment and a scope are declared once across spectral and every plugin.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from spectral.declaration import (
    Command,
    ConsolePage,
    Deployment,
    NavEntry,
    Plugin,
    Router,
    Scope,
    Tools,
)
from spectral.errors import ConfigurationError, PermanentError, TransientError
from spectral.plugins import DEPLOYMENTS_GROUP, EVENTS_GROUP, MIGRATIONS_GROUP, PLUGINS_GROUP

if TYPE_CHECKING:
    from contracts import DecodeError, EventEnvelope, EventRegistry, EventSpec
    from spectral.api.auth import console_requires, requires
    from spectral.api.resources import Resources
    from spectral.console.site import Console
    from spectral.db.connect import Conn, connect
    from spectral.db.queries import load_queries
    from spectral.devstack import resolve_database_url
    from spectral.engine.deployments import Factory
    from spectral.engine.handler import (
        Delivery,
        Handler,
        HandlerResult,
        Outcome,
        Rebuild,
        Rejection,
    )
    from spectral.maintenance.retention import Measured, Pruned, RetentionTask, delete_in_batches
    from spectral.mcp.tools import Caller
    from spectral.outbox.writer import OutboxItem, enqueue
    from spectral.settings import PluginSettings, Settings, load_settings

EXTENSION_API_VERSION: Final = "1.3"
"""MAJOR.MINOR of this module's surface: MINOR adds, MAJOR breaks (see the module docstring).
1.1 added the plugin declaration (``Plugin`` and its parts, ``PLUGINS_GROUP``), plugin settings
(``PluginSettings``, ``load_settings``), ``resolve_database_url``, and what a plugin's HTTP
routes, console pages and MCP tools are built with (``Resources``, ``requires``, ``Console``,
``console_requires``, ``Caller``), and the retention of a plugin's tables (``Plugin(retention=
...)``, ``RetentionTask``, ``Pruned``, ``Measured``, ``delete_in_batches``). 1.2 added ``connect``:
a database connection whose failures are spectral's errors (a command of a plugin reports a wrong
password in one line, exit 2). 1.3 added ``Handler.ahead``: a handler's database-free work on a
batch, done while the engine's dedup claim runs."""


def _contracts() -> Any:
    import contracts  # noqa: PLC0415 - imported when a name of it is first used

    return contracts


def _engine() -> Any:
    from spectral.engine import handler  # noqa: PLC0415

    return handler


def _deployments() -> Any:
    from spectral.engine import deployments  # noqa: PLC0415

    return deployments


def _settings() -> Any:
    from spectral import settings  # noqa: PLC0415

    return settings


def _devstack() -> Any:
    import spectral.devstack  # noqa: PLC0415

    return spectral.devstack


def _outbox() -> Any:
    from spectral.outbox import writer  # noqa: PLC0415

    return writer


def _connect() -> Any:
    from spectral.db import connect  # noqa: PLC0415

    return connect


def _queries() -> Any:
    from spectral.db import queries  # noqa: PLC0415

    return queries


def _auth() -> Any:
    from spectral.api import auth  # noqa: PLC0415

    return auth


def _resources() -> Any:
    from spectral.api import resources  # noqa: PLC0415

    return resources


def _console() -> Any:
    from spectral.console import site  # noqa: PLC0415

    return site


def _retention() -> Any:
    from spectral.maintenance import retention  # noqa: PLC0415

    return retention


def _mcp() -> Any:
    from spectral.mcp import tools  # noqa: PLC0415

    return tools


_LAZY: Final[dict[str, Callable[[], Any]]] = {
    **dict.fromkeys(("DecodeError", "EventEnvelope", "EventRegistry", "EventSpec"), _contracts),
    **dict.fromkeys(
        ("Delivery", "Handler", "HandlerResult", "Outcome", "Rebuild", "Rejection"), _engine
    ),
    "Factory": _deployments,
    "Settings": _settings,
    "PluginSettings": _settings,
    "load_settings": _settings,
    "resolve_database_url": _devstack,
    "OutboxItem": _outbox,
    "enqueue": _outbox,
    "Conn": _connect,
    "connect": _connect,
    "load_queries": _queries,
    "requires": _auth,
    "console_requires": _auth,
    "Resources": _resources,
    "Console": _console,
    "Caller": _mcp,
    **dict.fromkeys(("RetentionTask", "Pruned", "Measured", "delete_in_batches"), _retention),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(module(), name)
    globals()[name] = value
    return value


__all__ = [
    "DEPLOYMENTS_GROUP",
    "EVENTS_GROUP",
    "EXTENSION_API_VERSION",
    "MIGRATIONS_GROUP",
    "PLUGINS_GROUP",
    "Caller",
    "Command",
    "ConfigurationError",
    "Conn",
    "Console",
    "ConsolePage",
    "DecodeError",
    "Delivery",
    "Deployment",
    "EventEnvelope",
    "EventRegistry",
    "EventSpec",
    "Factory",
    "Handler",
    "HandlerResult",
    "Measured",
    "NavEntry",
    "OutboxItem",
    "Outcome",
    "PermanentError",
    "Plugin",
    "PluginSettings",
    "Pruned",
    "Rebuild",
    "Rejection",
    "Resources",
    "RetentionTask",
    "Router",
    "Scope",
    "Settings",
    "Tools",
    "TransientError",
    "connect",
    "console_requires",
    "delete_in_batches",
    "enqueue",
    "load_queries",
    "load_settings",
    "requires",
    "resolve_database_url",
]
