"""The `spectral` command: the framework's commands (:data:`COMMANDS`) and those the installed
plugins declare (spectral's built-in features among them: ``clusters``, ``triage``, ``work``...).

Each command (group) lives in its own module, listed with its one-line help and imported only
when that command runs: `spectral --help` and `spectral --version` load no command module (no
Kafka client, no database driver, no web framework), only the plugins' light declarations. A
command module in turn imports those inside the function that runs, after the settings are read,
so its `--help` and its refusal of a bad setting stay light too (tests/unit/cli/test_shell.py).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable
from functools import cache
from importlib import metadata
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from spectral.errors import ConfigurationError, SpectralError, TransientError
from spectral.plugins import InstalledPlugin, installed_plugins

COMMANDS: dict[str, tuple[str, str]] = {
    "dev": ("spectral.cli.dev:app", "Run a real Kafka broker (KRaft) and PostgreSQL locally."),
    "db": ("spectral.cli.db:app", "Database schema."),
    "topics": ("spectral.cli.topics:app", "Declare spectral's topics: plan, then apply."),
    "contracts": (
        "spectral.cli.contracts:app",
        "Wire contracts: JSON Schemas, AsyncAPI, the snapshot hash, checking records.",
    ),
    "outbox": ("spectral.cli.outbox:app", "The transactional outbox: relay its rows to Kafka."),
    "consume": ("spectral.cli.consume:consume", "Apply a deployment's events exactly once."),
    "api": (
        "spectral.cli.api:api",
        "Serve the HTTP API (OpenAPI at /openapi.json, docs at /docs) and the web console.",
    ),
    "tokens": (
        "spectral.cli.tokens:app",
        "API tokens for the HTTP API, the web console and the MCP server.",
    ),
    "mcp": (
        "spectral.cli.mcp:mcp",
        "Serve the Ops Agent tools over MCP (the features' tools, consumer operations).",
    ),
    "replay": (
        "spectral.cli.replay:replay",
        "Replay a range of a consumer's topics through its handler.",
    ),
    "offsets": ("spectral.cli.offsets:app", "Consumer group offsets."),
    "dlq": (
        "spectral.cli.dlq:app",
        "Dead letters: list, show, and redrive them to their source topic.",
    ),
    "rebuild": (
        "spectral.cli.rebuild:rebuild",
        "Rebuild a deployment's projection from its topics.",
    ),
    "maintenance": (
        "spectral.cli.maintenance:maintenance",
        "Prune published outbox rows and forget dedup keys behind the horizon.",
    ),
}
"""The framework's own commands: name -> ("module:attribute", one-line help); the attribute is
a Typer app or a function."""


@cache
def commands() -> dict[str, tuple[str, str]]:
    """Every command: the framework's and those of the installed plugins (each name once)."""
    return commands_of(installed_plugins())


def commands_of(plugins: Iterable[InstalledPlugin]) -> dict[str, tuple[str, str]]:
    """The framework's commands and those ``plugins`` declare; a name taken twice is refused."""
    found = dict(COMMANDS)
    owner = dict.fromkeys(COMMANDS, "spectral")
    for plugin in plugins:
        for command in plugin.declaration.commands:
            if command.name in found:
                raise ConfigurationError(
                    f"the command {command.name!r} is declared twice: by {owner[command.name]!r} "
                    f"and by {plugin.name!r}"
                )
            found[command.name] = (plugin.absolute(command.target), command.help)
            owner[command.name] = plugin.name
    return found


EXIT_FAILURE = 1
EXIT_CONFIGURATION = 2
EXIT_UNAVAILABLE = 3


def unwrap(text: str) -> str:
    """Help text as a terminal should flow it: the line breaks a docstring was wrapped with
    inside a paragraph become spaces (the help is re-wrapped to the terminal's width), while
    paragraphs, indented lines (examples, tables) and click's ``\\b`` blocks keep theirs."""
    paragraphs = []
    for paragraph in text.strip().split("\n\n"):
        lines = paragraph.split("\n")
        if lines[0].strip() == "\b" or any(line.startswith((" ", "\t")) for line in lines[1:]):
            paragraphs.append(paragraph)
        else:
            paragraphs.append(" ".join(line.strip() for line in lines))
    return "\n\n".join(paragraphs)


def _tidy(command: Any) -> None:
    """One help style throughout: unwrap the help of ``command`` and of its subcommands."""
    if command.help:
        command.help = unwrap(command.help)
    if command.short_help:
        command.short_help = unwrap(command.short_help)
    for sub in getattr(command, "commands", {}).values():
        _tidy(sub)


def load_command(name: str) -> TyperCommand | TyperGroup:
    """Import the module of command ``name`` and build its click command (its help and its
    subcommands' unwrapped: :func:`unwrap`)."""
    target, _ = commands()[name]
    module_name, attribute = target.split(":")
    found: Any = getattr(importlib.import_module(module_name), attribute)
    wrapper = typer.Typer(add_completion=False)  # completion is the root's business
    if isinstance(found, typer.Typer):
        wrapper.add_typer(found, name=name)
        group = typer.main.get_command(wrapper)
        assert isinstance(group, TyperGroup)  # noqa: S101 - one sub-app makes a group
        sub = group.commands[name]
        assert isinstance(sub, TyperGroup)  # noqa: S101
        _tidy(sub)
        return sub
    wrapper.command(name=name)(found)
    command = typer.main.get_command(wrapper)
    assert isinstance(command, TyperCommand)  # noqa: S101 - one function makes a command
    _tidy(command)
    return command


class _Listed(TyperCommand):
    """What `spectral --help` shows of a command without importing it."""


class LazyGroup(TyperGroup):
    """Lists every command (:func:`commands`); imports a command's module only to run it."""

    def list_commands(self, ctx: Any) -> list[str]:  # noqa: ARG002 - click's signature
        return sorted(commands())

    def get_command(self, ctx: Any, cmd_name: str) -> TyperCommand | None:  # noqa: ARG002
        if cmd_name not in commands():
            return None
        _, short = commands()[cmd_name]
        return _Listed(cmd_name, help=short, short_help=short)

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if name is not None and isinstance(command, _Listed):
            command = load_command(name)
        return name, command, rest


def _version(value: bool) -> None:
    if value:
        typer.echo(f"spectral {metadata.version('spectral')}")
        raise typer.Exit


app = typer.Typer(
    name="spectral",
    cls=LazyGroup,
    help="Typed events on Kafka, materialized exactly once into PostgreSQL.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,  # errors are reported as one clear line (see main)
    rich_markup_mode="rich",
)


@app.callback()
def _root(
    version: bool = typer.Option(
        False,  # noqa: FBT003 - typer's default-first Option signature
        "--version",
        "-V",
        is_eager=True,
        callback=_version,
        help="Print the version and exit.",
    ),
) -> None:
    """Typed events on Kafka, materialized exactly once into PostgreSQL."""


def main() -> None:
    """Console-script entry point: spectral errors become one line on stderr and an exit code."""
    try:
        app()
    except ConfigurationError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_CONFIGURATION)
    except TransientError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_UNAVAILABLE)
    except SpectralError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_FAILURE)
