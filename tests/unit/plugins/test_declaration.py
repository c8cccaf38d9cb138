"""The ``spectral.plugins`` group: one frozen Plugin per package, references resolved against
the declaring package, and each thing it adds declared once across spectral and every plugin.
spectral's own features are found the same way, in its own distribution."""

from __future__ import annotations

from importlib.metadata import EntryPoint, distribution
from typing import Final

import pytest

from spectral.cli import COMMANDS, commands_of
from spectral.declaration import Command, Deployment, Plugin, Scope
from spectral.engine.deployments import Deployments
from spectral.errors import ConfigurationError
from spectral.plugins import (
    DEPLOYMENTS_GROUP,
    PLUGINS_GROUP,
    InstalledPlugin,
    deployment_targets,
    installed_plugins,
    migration_tracks,
    plugin_event_sources,
    plugins_of,
    registry_of,
    scopes_of,
)
from tests.unit.plugins import fake_plugin

HERE: Final = "tests.unit.plugins.fake_plugin"
BUILT_INS: Final = {"clusters", "triage", "work", "work-executor"}


def _plugins(*pairs: tuple[str, str]) -> tuple[InstalledPlugin, ...]:
    return plugins_of(EntryPoint(name, value, PLUGINS_GROUP) for name, value in pairs)


def test_references_resolve_against_the_declaring_package() -> None:
    (notes,) = _plugins(("notes", f"{HERE}:PLUGIN"))
    assert notes.package == "tests.unit.plugins"
    assert notes.absolute(".fake_plugin:build") == f"{HERE}:build"
    assert notes.load(".fake_plugin:SPECS", "events") is fake_plugin.SPECS
    assert notes.module_name(".") == "tests.unit.plugins"
    assert not notes.own


def test_a_declared_plugin_adds_events_deployments_migrations_commands_and_scopes() -> None:
    plugins = _plugins(("notes", f"{HERE}:PLUGIN"))
    (source,) = plugin_event_sources(plugins)
    assert set(registry_of([source]).event_types()) == {"notes.note.added", "notes.note.removed"}
    (target,) = deployment_targets(plugins)
    assert (target.name, target.target) == ("notes", f"{HERE}:build")
    assert Deployments([target]).factory("notes") is fake_plugin.build
    (track,) = migration_tracks([], plugins)
    assert track.plugin == "notes"
    assert any(entry.name == "0001_notes.sql" for entry in track.directory.iterdir())
    assert commands_of(plugins)["notes"] == (f"{HERE}:broken", "Notes: list and add.")
    assert [scope.name for scope in scopes_of(plugins)] == ["notes:read", "notes:write"]


def test_the_deployments_group_still_works_beside_declared_deployments() -> None:
    legacy = EntryPoint("legacy-notes", f"{HERE}:build", DEPLOYMENTS_GROUP)
    targets = deployment_targets(_plugins(("notes", f"{HERE}:PLUGIN")), [legacy])
    deployments = Deployments(targets)
    assert deployments.names() == ["legacy-notes", "notes"]
    assert deployments.factory("legacy-notes") is fake_plugin.build


def test_a_deployment_declared_twice_is_refused() -> None:
    legacy = EntryPoint("notes", "elsewhere:build", DEPLOYMENTS_GROUP)
    with pytest.raises(ConfigurationError, match="two consumer deployments are named 'notes'"):
        Deployments(deployment_targets(_plugins(("notes", f"{HERE}:PLUGIN")), [legacy]))


def test_a_command_of_spectrals_own_or_another_plugins_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="'consume' is declared twice"):
        commands_of(_plugins(("mine", f"{HERE}:TAKES_CONSUME")))
    assert "consume" in COMMANDS


def test_a_scope_declared_twice_is_refused() -> None:
    plugins = _plugins(("notes", f"{HERE}:PLUGIN"), ("again", f"{HERE}:TAKES_NOTES_READ"))
    with pytest.raises(ConfigurationError, match="'notes:read' is declared twice"):
        scopes_of(plugins)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (f"{HERE}:NOT_A_PLUGIN", "gives dict, not a spectral.extend.Plugin"),
        (f"{HERE}:MISSING", "cannot be loaded"),
    ],
)
def test_a_broken_declaration_is_a_configuration_error_naming_it(value: str, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem) as refused:
        _plugins(("notes", value))
    assert "'notes'" in str(refused.value)


def test_a_reference_that_cannot_be_loaded_names_the_plugin_and_the_reference() -> None:
    (broken,) = _plugins(("broken", f"{HERE}:UNLOADABLE"))
    with pytest.raises(ConfigurationError, match=r"'broken'.*'\.no_such_module:SPECS'"):
        plugin_event_sources([broken])


@pytest.mark.parametrize(
    "make",
    [
        lambda: Command("Notes", "x", ".m:a"),
        lambda: Command("notes", "two\nlines", ".m:a"),
        lambda: Command("notes", "x", "no-colon"),
        lambda: Deployment("notes", "a.b"),
        lambda: Scope("notes", "no verb"),
        lambda: Scope("notes:read", "x", implies=("Notes:Read",)),
        lambda: Plugin(events=("not a reference",)),
        lambda: Plugin(migrations="a b"),
    ],
)
def test_a_malformed_declaration_is_refused_where_it_is_written(make: object) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - each message names its own field
        make()  # type: ignore[operator]


def test_the_built_in_features_are_plugins_of_spectrals_own_distribution() -> None:
    declared = {entry.name for entry in distribution("spectral").entry_points}
    assert declared >= BUILT_INS
    own = {plugin.name for plugin in installed_plugins() if plugin.own}
    assert own == BUILT_INS
