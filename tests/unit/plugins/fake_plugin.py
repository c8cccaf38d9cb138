"""Event specs and migration folders for the discovery tests (never installed)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from pydantic import BaseModel, ConfigDict

from contracts import EventSpec
from spectral import resources
from spectral.extend import Command, Deployment, Plugin, Scope


class Note(BaseModel):
    model_config = ConfigDict(frozen=True)
    note_id: str
    text: str


def _spec(event_type: str, version: int = 1) -> EventSpec[Note]:
    return EventSpec(
        event_type=event_type,
        schema_version=version,
        payload_model=Note,
        idempotency_key=lambda p: p.note_id,
        record_key=lambda p: p.note_id,
        default_source="notes",
        default_target="notes",
    )


NOTE_ADDED: Final = _spec("notes.note.added")
SPECS: Final = (NOTE_ADDED, _spec("notes.note.removed"))
SAME_AS_NOTE_ADDED: Final = _spec("notes.note.added")
IN_SPECTRALS_NAMESPACE: Final = _spec("work.note.added")
A_DEAD_LETTER_TOPIC: Final = _spec("notes.note.added.dlq")
ONE_PART: Final = _spec("notes")
UPPER_CASE: Final = _spec("Notes.Note.Added")
VERSION_ZERO: Final = _spec("notes.note.zero", version=0)
NOT_A_SPEC: Final = "notes.note.added"
EMPTY: Final = ()
MIGRATIONS: Final = Path(__file__).with_name("fake_migrations")
SPECTRALS_MIGRATIONS: Final = resources.migrations()


def broken() -> None:
    raise AssertionError("never called")


def build(*_: object) -> object:
    raise AssertionError("never called")


NOTES_READ: Final = Scope("notes:read", "read notes")
PLUGIN: Final = Plugin(
    events=(".fake_plugin:SPECS",),
    deployments=(Deployment("notes", ".fake_plugin:build"),),
    migrations=".fake_migrations",
    commands=(Command("notes", "Notes: list and add.", ".fake_plugin:broken"),),
    scopes=(
        NOTES_READ,
        Scope("notes:write", "write notes", implies=(NOTES_READ.name,)),
    ),
)
"""A plugin declared the way of the ``spectral.plugins`` group (references relative to this
package, tests.unit.plugins)."""
TAKES_CONSUME: Final = Plugin(commands=(Command("consume", "Mine.", ".fake_plugin:broken"),))
TAKES_NOTES_READ: Final = Plugin(scopes=(Scope("notes:read", "read notes, again"),))
UNLOADABLE: Final = Plugin(events=(".no_such_module:SPECS",))
NOT_A_PLUGIN: Final = {"events": [".fake_plugin:SPECS"]}
