"""Plugin discovery (spectral/plugins.py): what a package's entry points may add, and what is
refused — a plugin never replaces or shadows spectral's own definitions."""

from __future__ import annotations

import re
from importlib.metadata import EntryPoint

import pytest

from contracts import DecodeError
from spectral.errors import ConfigurationError
from spectral.plugins import (
    EVENTS_GROUP,
    MIGRATIONS_GROUP,
    EventSource,
    event_sources,
    installed_event_sources,
    installed_registry,
    migration_tracks,
    registry_of,
)
from tests.unit.plugins import fake_plugin

HERE = "tests.unit.plugins.fake_plugin"


def _events(*pairs: tuple[str, str]) -> list[EntryPoint]:
    return [EntryPoint(name, value, EVENTS_GROUP) for name, value in pairs]


def test_a_plugins_events_join_spectrals_and_decode() -> None:
    sources = event_sources(_events(("notes", f"{HERE}:SPECS")))
    registry = registry_of([*installed_event_sources(), *sources])
    assert set(registry.event_types()) == {
        *installed_registry().event_types(),
        "notes.note.added",
        "notes.note.removed",
    }
    envelope = fake_plugin.NOTE_ADDED.envelope(fake_plugin.Note(note_id="n-1", text="hi"))
    data = registry.encode(envelope)
    assert registry.decode_record(data, b"n-1").payload.text == "hi"
    with pytest.raises(DecodeError) as refused:  # the installed registry does not know it
        installed_registry().decode(data)
    assert refused.value.reason.value == "unknown_event_type"


def test_one_spec_is_accepted_as_well_as_an_iterable() -> None:
    (source,) = event_sources(_events(("notes", f"{HERE}:NOTE_ADDED")))
    assert [s.event_type for s in source.specs] == ["notes.note.added"]


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        ("IN_SPECTRALS_NAMESPACE", "spectral's own"),
        ("A_DEAD_LETTER_TOPIC", "dead-letter topics"),
        ("ONE_PART", "at least two parts"),
        ("UPPER_CASE", "lowercase dotted"),
        ("VERSION_ZERO", "starts at 1"),
    ],
)
def test_event_types_that_would_shadow_or_break_topics_are_refused(
    target: str, problem: str
) -> None:
    sources = event_sources(_events(("notes", f"{HERE}:{target}")))
    with pytest.raises(ConfigurationError, match=problem):
        registry_of([*installed_event_sources(), *sources])


def test_a_plugin_can_never_register_one_of_spectrals_event_types() -> None:
    builtin = installed_registry().specs()[0]
    forged = EventSource("notes", (builtin,))
    with pytest.raises(ConfigurationError, match="are spectral's own"):
        registry_of([*installed_event_sources(), forged])


def test_the_namespaces_spectrals_own_distribution_registers_are_reserved() -> None:
    own = EventSource("notes-own", (fake_plugin.NOTE_ADDED,), own=True)
    other = EventSource("other", (fake_plugin.SPECS[1],))
    with pytest.raises(ConfigurationError, match=re.escape("the namespaces notes. are")):
        registry_of([other, own])
    assert set(registry_of([own]).event_types()) == {"notes.note.added"}


def test_two_plugins_registering_one_event_type_are_both_named() -> None:
    sources = event_sources(
        _events(("notes", f"{HERE}:SPECS"), ("other-notes", f"{HERE}:SAME_AS_NOTE_ADDED"))
    )
    with pytest.raises(
        ConfigurationError, match=re.escape("'other-notes' registers 'notes.note.added'")
    ):
        registry_of(sources)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("tests.unit.plugins.broken_plugin:SPECS", "RuntimeError: the plugin's own import fails"),
        (f"{HERE}:MISSING", "cannot be loaded"),
        ("tests.unit.plugins.no_such_module:SPECS", "cannot be loaded"),
        (f"{HERE}:NOT_A_SPEC", "gives str, not an EventSpec"),
        (f"{HERE}:broken", "gives function, not an EventSpec"),
        (f"{HERE}:EMPTY", "registers no event"),
    ],
)
def test_a_broken_plugin_is_a_configuration_error_naming_it(value: str, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem) as refused:
        event_sources(_events(("notes", value)))
    assert "'notes'" in str(refused.value)


@pytest.mark.parametrize("name", ["spectral", "Notes", "-notes", "n" * 64, "notes/x"])
def test_plugin_names_are_checked(name: str) -> None:
    with pytest.raises(ConfigurationError, match="plugin name"):
        event_sources(_events((name, f"{HERE}:SPECS")))


def test_one_name_declared_twice_with_different_targets_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="two plugins are named 'notes'"):
        event_sources(_events(("notes", f"{HERE}:SPECS"), ("notes", f"{HERE}:NOTE_ADDED")))


def test_migration_tracks_are_folders_by_plugin_name() -> None:
    (track,) = migration_tracks([EntryPoint("notes", f"{HERE}:MIGRATIONS", MIGRATIONS_GROUP)])
    assert track.plugin == "notes"
    assert [e.name for e in track.directory.iterdir()] == ["0001_notes.sql"]
    (package,) = migration_tracks(
        [EntryPoint("notes", "tests.unit.plugins.fake_migrations", MIGRATIONS_GROUP)]
    )
    assert any(e.name == "0001_notes.sql" for e in package.directory.iterdir())


@pytest.mark.parametrize("value", ["spectral_schemas.sql", f"{HERE}:SPECTRALS_MIGRATIONS"])
def test_a_track_can_never_be_spectrals_own_migrations(value: str) -> None:
    with pytest.raises(ConfigurationError, match="spectral's own migrations"):
        migration_tracks([EntryPoint("notes", value, MIGRATIONS_GROUP)])


def test_a_track_must_be_a_folder() -> None:
    with pytest.raises(ConfigurationError, match="a migration track is a package"):
        migration_tracks([EntryPoint("notes", f"{HERE}:NOT_A_SPEC", MIGRATIONS_GROUP)])
