"""The extension API: everything a plugin package needs, in one module (docs/extending.md).

What is imported from here is **stable**: within one ``EXTENSION_API_VERSION`` major number a
name is never removed or renamed and a signature only gains optional parameters; a change that
breaks a plugin raises the major number. Everything else in spectral — every other module, and
any member whose name starts with ``_`` — is **internal** and may change in any release, even
if a plugin can import it. ``spectral.testing`` (the pytest plugin) follows the same version.

The plugin's side of the contract (checked when spectral loads it):

* an event type is a lowercase dotted name in the plugin's own namespace (``platform.`` and
  ``work.`` are spectral's), at most 200 characters, registered once;
* a deployment factory ``build(settings, database_url, registry) -> Handler`` does no I/O;
* a migration track is a package of ``NNNN_name.sql`` files, numbered from 0001 without gaps,
  append-only (a changed file is refused), that never changes spectral's objects.
"""

from __future__ import annotations

from typing import Final

from contracts import DecodeError, EventEnvelope, EventRegistry, EventSpec
from spectral.db.connect import Conn
from spectral.db.queries import load_queries
from spectral.engine.deployments import Factory
from spectral.engine.handler import (
    Delivery,
    Handler,
    HandlerResult,
    Outcome,
    Rebuild,
    Rejection,
)
from spectral.errors import ConfigurationError, PermanentError, TransientError
from spectral.outbox.writer import OutboxItem, enqueue
from spectral.plugins import DEPLOYMENTS_GROUP, EVENTS_GROUP, MIGRATIONS_GROUP
from spectral.settings import Settings

EXTENSION_API_VERSION: Final = "1.0"
"""MAJOR.MINOR of this module's surface: MINOR adds, MAJOR breaks (see the module docstring)."""

__all__ = [
    "DEPLOYMENTS_GROUP",
    "EVENTS_GROUP",
    "EXTENSION_API_VERSION",
    "MIGRATIONS_GROUP",
    "ConfigurationError",
    "Conn",
    "DecodeError",
    "Delivery",
    "EventEnvelope",
    "EventRegistry",
    "EventSpec",
    "Factory",
    "Handler",
    "HandlerResult",
    "OutboxItem",
    "Outcome",
    "PermanentError",
    "Rebuild",
    "Rejection",
    "Settings",
    "TransientError",
    "enqueue",
    "load_queries",
]
