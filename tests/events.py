"""spectral's event types as installed — its built-in features register theirs through entry
points, like any plugin — and the registry's operations over them, for tests."""

from __future__ import annotations

from typing import Final

from contracts import EventRegistry
from spectral.plugins import installed_registry

EVENTS: Final[EventRegistry] = installed_registry()

decode: Final = EVENTS.decode
decode_as: Final = EVENTS.decode_as
decode_record: Final = EVENTS.decode_record
encode: Final = EVENTS.encode
record_key: Final = EVENTS.record_key
check_record_key: Final = EVENTS.check_record_key
spec_for: Final = EVENTS.spec


def registered_event_types() -> tuple[str, ...]:
    """Every registered event type, sorted."""
    return EVENTS.event_types()
