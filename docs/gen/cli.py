"""The CLI reference: every command, argument and option, from the click tree typer builds.

Commands are resolved the way ``spectral`` resolves them when it runs (so a command a plugin
adds is included); a command's page section says what ``spectral COMMAND --help`` says.
"""

from __future__ import annotations

import inspect
from typing import Any, Final

import typer

from docs.gen import GENERATED
from docs.gen.text import anchor, cell, code

HIDDEN_OPTIONS: Final = {"help", "install_completion", "show_completion"}


# typer builds its commands with the click it vendors: they are read here by their attributes
# (click's own), never by class.
Command = Any
Context = Any
Parameter = Any


def _context(command: Command, name: str, parent: Context | None = None) -> Context:
    return command.context_class(command, info_name=name, parent=parent)


def _root() -> tuple[Command, Context]:
    from spectral.cli import app  # noqa: PLC0415 - imported when rendering

    group = typer.main.get_command(app)
    return group, _context(group, "spectral")


def _is_group(command: Command) -> bool:
    return hasattr(command, "list_commands")


def _subcommands(group: Command, ctx: Context) -> list[tuple[str, Command]]:
    found = []
    for name in group.list_commands(ctx):
        _, command, _ = group.resolve_command(ctx, [name])
        if command is not None and not command.hidden:
            found.append((name, command))
    return found


def _help(command: Command) -> str:
    return inspect.cleandoc(command.help or command.short_help or "")


def _kind(parameter: Parameter) -> str:
    kind = parameter.type
    choices = getattr(kind, "choices", None)
    if choices is not None:
        return " \\| ".join(code(str(c)) for c in choices)
    if getattr(parameter, "is_flag", False):
        return "flag"
    words = {"text": "text", "integer": "integer", "float": "number", "boolean": "boolean"}
    name = str(getattr(kind, "name", "value"))
    text = words.get(name, name.lower())
    if hasattr(kind, "min_open"):  # a number range
        bounds = []
        if kind.min is not None:
            bounds.append(f"{'>' if kind.min_open else '≥'} {kind.min}")
        if kind.max is not None:
            bounds.append(f"{'<' if kind.max_open else '≤'} {kind.max}")
        text = ("integer" if "integer" in name else "number") + (
            f" ({', '.join(bounds)})" if bounds else ""
        )
    if parameter.multiple:
        text += ", repeatable"
    return text


def _default(parameter: Parameter) -> str:
    if parameter.required:
        return "required"
    default = parameter.default
    if default is None or default == () or callable(default):
        return ""
    if getattr(parameter, "is_flag", False) and default is False:
        return ""
    return code(str(default).lower() if isinstance(default, bool) else str(default))


def _names(parameter: Parameter) -> str:
    if parameter.param_type_name == "argument":
        return code(parameter.human_readable_name)
    names = [*parameter.opts, *getattr(parameter, "secondary_opts", [])]
    return ", ".join(code(n) for n in names)


def _section(path: list[str], command: Command, ctx: Context, out: list[str]) -> None:
    title = " ".join(path)
    depth = min(len(path), 4)
    out += [f"{'#' * depth} {code(title)}", ""]
    text = _help(command)
    if text:
        out += [text, ""]
    pieces = [p for p in command.params if p.name not in HIDDEN_OPTIONS]
    usage = " ".join([title, *command.collect_usage_pieces(ctx)])
    out += ["```", usage, "```", ""]
    if pieces:
        out += ["| argument or option | type | default | meaning |", "| --- | --- | --- | --- |"]
        for parameter in pieces:
            help_text = getattr(parameter, "help", None) or ""
            out.append(
                f"| {_names(parameter)} | {_kind(parameter)} | {_default(parameter)} "
                f"| {cell(help_text)} |"
            )
        out.append("")
    if _is_group(command):
        for name, sub in _subcommands(command, ctx):
            _section([*path, name], sub, _context(sub, name, ctx), out)


def render() -> str:
    root, ctx = _root()
    commands = _subcommands(root, ctx)
    out = [
        GENERATED,
        "",
        "# Command line",
        "",
        (
            "One command, `spectral`, with a subcommand per task. `-h` or `--help` on any of them "
            "prints what this page says; `spectral --version` prints the version. Settings come "
            "from `SPECTRAL_*` environment variables ([settings reference](settings.md))."
        ),
        "",
        (
            "Exit codes, on every command: **0** done, **1** failed, **2** configuration (bad "
            "settings, no stack, a refused database login or grant; nothing was changed), **3** a "
            "server unavailable (Kafka or PostgreSQL; try again)."
        ),
        "",
        "| command | what it does |",
        "| --- | --- |",
    ]
    out += [
        f"| [{code(name)}](#{anchor('spectral ' + name)}) | "
        f"{cell(_help(command).split(chr(10) + chr(10))[0])} |"
        for name, command in commands
    ]
    out.append("")
    for name, command in commands:
        _section(["spectral", name], command, _context(command, name, ctx), out)
    return "\n".join(out).rstrip("\n") + "\n"
