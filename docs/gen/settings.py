"""The settings reference: every ``SPECTRAL_*`` variable, from the settings classes.

Each field of each settings class becomes a row (variable, type, default, meaning); a variable
the code reads without a settings class is found by scanning the source for ``SPECTRAL_*``
names and must be described in :data:`OUTSIDE_SETTINGS`, or the page cannot be generated.
"""

from __future__ import annotations

import ast
import enum
import re
import types
import typing
from pathlib import Path
from typing import Any, Final

from pydantic import SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

from docs.gen import GENERATED, ROOT
from docs.gen.text import cell, code

SOURCES: Final = ("spectral", "contracts", "producers", "consumers")
"""Folders whose code is spectral itself (the variables it reads are the users' business)."""

TEST_SOURCES: Final = ("tests",)

VARIABLE: Final = re.compile(r"SPECTRAL_[A-Z0-9_]*[A-Z0-9]")

OUTSIDE_SETTINGS: Final = {
    "SPECTRAL_WORK_CRASH_AT": "Fault tests only: the work executor kills itself (SIGKILL) at "
    "this named step, so a test can check what its successor does. Never set it in production.",
    "SPECTRAL_RELAY_CRASH_AFTER_PUBLISH": "Fault tests only: `1` makes the outbox relay kill "
    "itself after publishing a batch and before marking it published. Never set it in "
    "production.",
}
"""Variables spectral reads through a fault-hook section no plugin declares (so the sections
below do not list them), and what each means."""

TEST_VARIABLES: Final = {
    "SPECTRAL_CHROMIUM": "The Chromium executable the console's browser tests drive "
    "(default: Debian's `chromium` on the PATH).",
    "SPECTRAL_GOLDEN_UPDATE": "`1` rewrites the stub synthesizer's golden files instead of "
    "comparing with them.",
    "SPECTRAL_SCREENSHOTS": "A folder where the console's browser test saves its screenshots "
    "(`docs/screenshots` for these docs).",
    "SPECTRAL_TEST_DOCKER": "`never` keeps the suite from starting Kafka and PostgreSQL with "
    "testcontainers when a Docker engine answers (default `auto`).",
}
"""Variables only the test suite reads."""


def settings_classes() -> list[type[BaseSettings]]:
    """Every settings class spectral reads its environment through: the framework's, the network
    surfaces', the LLM gateway's and each installed plugin's section (spectral's built-in
    features among them)."""
    from spectral.api.settings import ApiSettings  # noqa: PLC0415 - imported when rendering
    from spectral.llm.settings import LlmSettings  # noqa: PLC0415
    from spectral.plugins import settings_classes as plugin_sections  # noqa: PLC0415
    from spectral.settings import Settings  # noqa: PLC0415

    return [Settings, ApiSettings, LlmSettings, *plugin_sections()]


def _type(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    arguments = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin in {typing.Union, types.UnionType}:
        return " or ".join(_type(a) for a in arguments)
    if origin is typing.Literal:
        return " \\| ".join(code(str(a)) for a in typing.get_args(annotation))
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " \\| ".join(code(str(m.value)) for m in annotation)
    if annotation is SecretStr:
        return "secret text"
    if origin in {dict, list}:
        return "JSON " + ("object" if origin is dict else "list")
    names = {str: "text", int: "integer", float: "number", bool: "boolean", Path: "path"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _default(field: FieldInfo) -> str:
    factory = field.default_factory
    if factory is not None:
        if factory in {dict, list, tuple, set}:
            return "empty"
        return cell((factory.__doc__ or "computed when the command starts").strip())
    value = field.default
    if value is None or value is PydanticUndefined:
        return "—"
    if isinstance(value, enum.Enum):
        value = value.value
    if value == "":
        return "empty"
    return code(str(value))


def _bounds(field: FieldInfo) -> str:
    words = []
    for rule in field.metadata:
        for name, sign in (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤")):
            bound = getattr(rule, name, None)
            if bound is not None:
                words.append(f"{sign} {bound}")
    return f" ({', '.join(words)})" if words else ""


def _env_name(cls: type[BaseSettings], name: str, field: FieldInfo) -> str:
    prefix = str(cls.model_config.get("env_prefix", ""))
    return (
        field.validation_alias if isinstance(field.validation_alias, str) else prefix + name
    ).upper()


def read_by(folders: tuple[str, ...]) -> set[str]:
    """Every ``SPECTRAL_*`` name written as a whole string in the Python code of ``folders``."""
    found: set[str] = set()
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text("utf-8"))):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and VARIABLE.fullmatch(node.value)
                ):
                    found.add(node.value)
    return found


def documented() -> dict[str, str]:
    """Every documented variable and where: ``settings``, ``outside`` or ``tests``."""
    where = {
        _env_name(cls, name, field): "settings"
        for cls in settings_classes()
        for name, field in cls.model_fields.items()
    }
    where.update(dict.fromkeys(OUTSIDE_SETTINGS, "outside"))
    where.update(dict.fromkeys(TEST_VARIABLES, "tests"))
    return where


def render() -> str:
    known = documented()
    missing = sorted((read_by(SOURCES) | read_by(TEST_SOURCES)) - set(known))
    if missing:
        raise SystemExit(
            f"variables read but not documented: {', '.join(missing)} — give them a settings "
            "field (or describe them in docs/gen/settings.py)"
        )
    lines = [
        GENERATED,
        "",
        "# Settings",
        "",
        (
            "Every `spectral` command reads its configuration from `SPECTRAL_*` environment "
            "variables, through the settings classes below (pydantic-settings: a value that does "
            "not parse stops the command with exit code 2 before it does anything). Secrets are "
            "never printed or logged: they are held as secret values, masked in `repr`, and the "
            "log pipeline also masks passwords inside URLs."
        ),
        "",
        (
            "A list or object setting is written as JSON, e.g. "
            "`SPECTRAL_WORK_METRIC_ORGS='[\"acme\"]'`. Long-running commands also take "
            "`--metrics-port` and `--metrics-host`: see the [CLI reference](cli.md)."
        ),
        "",
    ]
    for cls in settings_classes():
        lines += [f"## {cls.__name__} ({code(cls.__module__)})", ""]
        doc = (cls.__doc__ or "").strip()
        if doc:
            lines += [cell(doc), ""]
        lines += ["| variable | type | default | meaning |", "| --- | --- | --- | --- |"]
        for name, field in cls.model_fields.items():
            description = field.description or ""
            if description == "":
                raise SystemExit(f"{cls.__name__}.{name} has no description: give its Field one")
            lines.append(
                f"| {code(_env_name(cls, name, field))} | {_type(field.annotation)}"
                f"{_bounds(field)} | {_default(field)} | {cell(description)} |"
            )
        lines.append("")
    lines += [
        "## Fault hooks (fault tests only)",
        "",
        "| variable | meaning |",
        "| --- | --- |",
        *(f"| {code(k)} | {cell(v)} |" for k, v in sorted(OUTSIDE_SETTINGS.items())),
        "",
        "## Read by the test suite only",
        "",
        "| variable | meaning |",
        "| --- | --- |",
        *(f"| {code(k)} | {cell(v)} |" for k, v in sorted(TEST_VARIABLES.items())),
        "",
    ]
    return "\n".join(lines)
