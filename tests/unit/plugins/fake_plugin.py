"""Event specs and migration folders for the discovery tests (never installed)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from pydantic import BaseModel, ConfigDict

from contracts import EventSpec
from spectral import resources


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
