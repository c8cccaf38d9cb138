"""The house reads as layers: contracts <- foundation <- kafka/db adapters <- engine <- services
<- handlers <- composition roots (the CLI, spectral.testing). A module imports its own layer and
those below it, never one above: every ``import`` counts, at module level or inside a function,
under ``TYPE_CHECKING`` or not (a lazy import is an arrow all the same)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Final

import pytest

ROOT: Final = Path(__file__).resolve().parents[2]
PACKAGES: Final = ("contracts", "spectral", "producers", "consumers")

LAYERS: Final[tuple[tuple[str, ...], ...]] = (
    ("contracts",),
    (  # foundation: what every layer may use ("spectral" is the package's own __init__ only)
        "spectral",
        "spectral.errors",
        "spectral.settings",
        "spectral.resources",
        "spectral.retry",
        "spectral.faults",
        "spectral.observability",
        "spectral.service",
        "spectral.plugins",
    ),
    ("spectral.kafka", "spectral.db", "spectral.devstack"),  # adapters
    (  # the engine, and the extension API that re-exports it
        "spectral.consumer",
        "spectral.outbox",
        "spectral.dlq",
        "spectral.maintenance",
        "spectral.extend",
    ),
    (  # services the handlers and surfaces build on
        "spectral.llm",
        "spectral.work",
        "spectral.auth",
        "spectral.api",
        "spectral.console",
        "spectral.mcp",
        "spectral.ops",
    ),
    ("consumers", "producers"),  # handlers and producers
    ("spectral.cli", "spectral.testing"),  # composition roots
)


ROOT_MODULES: Final = {"spectral"}
"""Placed alone, not with their subpackages: a new subpackage must be given its layer."""


def layer_of(module: str) -> int:
    """The layer of ``module``: its longest matching prefix in :data:`LAYERS`."""
    best, depth = -1, -1
    for number, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            inside = module == prefix or (
                module.startswith(prefix + ".") and prefix not in ROOT_MODULES
            )
            if inside and len(prefix) > depth:
                best, depth = number, len(prefix)
    if best < 0:
        raise AssertionError(f"{module} is in no layer: add its package to LAYERS")
    return best


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def imports() -> tuple[tuple[str, str, int], ...]:
    """(importing module, imported module, line) for every import of the four packages."""
    return tuple(_imports())


def _imports() -> Iterator[tuple[str, str, int]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            module = _module_name(path)
            for node in ast.walk(ast.parse(path.read_text("utf-8"))):
                if isinstance(node, ast.Import):
                    targets = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    targets = [node.module]
                else:
                    continue
                for target in targets:
                    if target.split(".", 1)[0] in PACKAGES:
                        yield module, target, node.lineno


def test_no_import_points_up_a_layer() -> None:
    upward = [
        f"{module}:{line} imports {target} (layer {layer_of(module)} -> {layer_of(target)})"
        for module, target, line in imports()
        if layer_of(target) > layer_of(module)
    ]
    assert upward == []


def test_the_defects_the_layers_once_had_stay_fixed() -> None:
    """The Kafka adapters import no engine module; offsets never import the replay engine."""
    arrows = {(module, target) for module, target, _ in imports()}
    assert not {a for a in arrows if a[0].startswith("spectral.kafka.") and "consumer" in a[1]}
    assert ("spectral.consumer.offsets", "spectral.consumer.replay") not in arrows


@pytest.mark.parametrize(
    ("module", "layer"),
    [("contracts.registry", 0), ("spectral.kafka.groups", 2), ("spectral.cli.replay", 6)],
)
def test_modules_are_placed_by_their_longest_prefix(module: str, layer: int) -> None:
    assert layer_of(module) == layer


def test_a_module_outside_every_layer_is_an_error() -> None:
    with pytest.raises(AssertionError, match="in no layer"):
        layer_of("spectral.nowhere")
