"""The house's import graph: every ``import`` counts, at module level or inside a function, under
``TYPE_CHECKING`` or not (a lazy import is an arrow all the same).

* ``contracts`` imports nothing of the other packages: it is the pure wire contract;
* the framework (``spectral``) never imports a feature (``producers``, ``consumers``): the
  features plug into it through entry points;
* inside the framework, a module imports its own layer and those below it, never one above;
* between features only the arrows of :data:`FEATURE_ARROWS`;
* no loop between packages (a folder is one package; a module directly in ``spectral/`` is one of
  its own).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from functools import cache
from graphlib import CycleError, TopologicalSorter
from pathlib import Path
from typing import Final

import pytest

ROOT: Final = Path(__file__).resolve().parents[2]
PACKAGES: Final = ("contracts", "spectral", "producers", "consumers")
FEATURES: Final = ("producers", "consumers")

LAYERS: Final[tuple[tuple[str, ...], ...]] = (
    (  # foundation: what every layer may use ("spectral" is the package's own __init__ only)
        "spectral",
        "spectral.declaration",
        "spectral.errors",
        "spectral.settings",
        "spectral.resources",
        "spectral.retry",
        "spectral.lifecycle",
        "spectral.observability",
        "spectral.plugins",
    ),
    ("spectral.kafka", "spectral.db", "spectral.devstack"),  # adapters
    (  # the engine and what runs beside it
        "spectral.engine",
        "spectral.replay",
        "spectral.outbox",
        "spectral.dlq",
        "spectral.maintenance",
    ),
    (  # services the features and surfaces build on
        "spectral.llm",
        "spectral.auth",
        "spectral.api",
        "spectral.console",
        "spectral.mcp",
        "spectral.ops",
    ),
    ("spectral.cli", "spectral.testing", "spectral.extend"),  # the hosts, the extension API
)
"""The framework's layers, bottom up."""

FEATURE_ARROWS: Final = frozenset(
    {
        ("producers.work", "producers.work.domain"),  # the command side of durable work
        ("consumers.work_executor", "producers.work.domain"),  # its executor
        ("producers.clusters", "producers.work.domain"),  # the rule stub as a work function
    }
)
"""The only arrows between features (and parts of one): onto the durable-work domain."""

FEATURE_ROOTS: Final = (
    "producers.work.domain",
    "producers.work",
    "producers.clusters",
    "consumers.rule_candidates",
    "consumers.work_executor",
)
"""The features, longest first: a module belongs to the first that prefixes it."""

ROOT_MODULES: Final = {"spectral"}
"""Placed alone, not with their subpackages: a new subpackage must be given its layer."""


def layer_of(module: str) -> int:
    """The layer of framework module ``module``: its longest matching prefix in :data:`LAYERS`."""
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


def feature_of(module: str) -> str | None:
    """The feature ``module`` belongs to (None for contracts and the framework)."""
    for feature in FEATURE_ROOTS:
        if module == feature or module.startswith(feature + "."):
            return feature
    if module.split(".", 1)[0] in FEATURES:
        raise AssertionError(f"{module} is in no feature: add it to FEATURE_ROOTS")
    return None


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_of(path: Path) -> str:
    """The package node of a file in the loop check: its folder, or, directly in ``spectral/``,
    the module itself."""
    relative = path.relative_to(ROOT)
    if relative.parent == Path("spectral") and path.name != "__init__.py":
        return _module_name(path)
    return ".".join(relative.parent.parts)


@cache
def imports() -> tuple[tuple[str, str, int, str], ...]:
    """(importing module, imported module, line, importing package) for every import."""
    return tuple(_imports())


def _imports() -> Iterator[tuple[str, str, int, str]]:
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
                        yield module, target, node.lineno, package_of(path)


def _top(module: str) -> str:
    return module.split(".", 1)[0]


def test_contracts_import_nothing_of_the_house() -> None:
    arrows = [
        f"{module}:{line} imports {target}"
        for module, target, line, _ in imports()
        if _top(module) == "contracts" and _top(target) != "contracts"
    ]
    assert arrows == []


def test_the_framework_never_imports_a_feature() -> None:
    arrows = [
        f"{module}:{line} imports {target}"
        for module, target, line, _ in imports()
        if _top(module) == "spectral" and _top(target) in FEATURES
    ]
    assert arrows == []


def test_no_framework_import_points_up_a_layer() -> None:
    upward = [
        f"{module}:{line} imports {target} (layer {layer_of(module)} -> {layer_of(target)})"
        for module, target, line, _ in imports()
        if _top(module) == "spectral"
        and _top(target) == "spectral"
        and layer_of(target) > layer_of(module)
    ]
    assert upward == []


def test_features_import_one_another_only_along_the_allowed_arrows() -> None:
    arrows = sorted(
        {
            f"{feature_of(module)} -> {feature_of(target)} ({module}:{line})"
            for module, target, line, _ in imports()
            if feature_of(module) is not None
            and feature_of(target) is not None
            and feature_of(module) != feature_of(target)
            and (feature_of(module), feature_of(target)) not in FEATURE_ARROWS
        }
    )
    assert arrows == []


def _loop(edges: dict[str, set[str]]) -> list[str]:
    """One loop of ``edges`` (its nodes, the first repeated at the end), or [] when none."""
    try:
        TopologicalSorter(edges).prepare()
    except CycleError as exc:
        return list(exc.args[1])
    return []


def _package_of_module(module: str, known: set[str]) -> str:
    while module not in known and "." in module:
        module = module.rsplit(".", 1)[0]
    return module


def test_no_package_loop() -> None:
    known = {package for _, _, _, package in imports()}
    edges: dict[str, set[str]] = defaultdict(set)
    for _, target, _, package in imports():
        into = _package_of_module(target, known)
        if into != package:
            edges[package].add(into)
    assert _loop(edges) == []


def test_a_loop_is_found() -> None:
    loop = _loop({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})
    assert set(loop) == {"a", "b", "c"}
    assert loop[0] == loop[-1]


@pytest.mark.parametrize(
    ("module", "layer"),
    [("spectral.settings", 0), ("spectral.kafka.groups", 1), ("spectral.cli.replay", 4)],
)
def test_modules_are_placed_by_their_longest_prefix(module: str, layer: int) -> None:
    assert layer_of(module) == layer


def test_a_module_outside_every_layer_is_an_error() -> None:
    with pytest.raises(AssertionError, match="in no layer"):
        layer_of("spectral.nowhere")


def test_the_kafka_adapters_import_no_engine_module() -> None:
    """A defect the layers once had stays fixed; offsets never import the replay engine."""
    arrows = {(module, target) for module, target, _, _ in imports()}
    assert not {a for a in arrows if a[0].startswith("spectral.kafka.") and "engine" in a[1]}
    assert ("spectral.replay.offsets", "spectral.replay.replay") not in arrows


RENAMED: Final = ("contracts", "producers", "consumers")
"""The folders the wheel ships inside the ``spectral`` namespace (setup.py): a string that names
one of them would point nowhere once installed."""


def _strings(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, text) of the string constants of ``tree`` that are not docstrings."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            yield node.lineno, node.value


def _names_a_renamed_package(text: str) -> bool:
    """Whether ``text`` is a reference (``a.b``, ``a.b:c``, ``a:c``) to a module or package of
    a renamed folder (a bare word such as the ``contracts`` command is not one)."""
    module, colon, _ = text.partition(":")
    if module.split(".", 1)[0] not in RENAMED or not (colon or "." in module):
        return False
    place = ROOT.joinpath(*module.split("."))
    return place.with_suffix(".py").is_file() or (place / "__init__.py").is_file()


def test_no_code_names_a_package_the_wheel_renames_in_a_string() -> None:
    """``importlib.import_module("consumers...")``, ``files("producers.work")`` or a
    ``"contracts.x:y"`` reference would break in the wheel: code says ``__package__``, a
    relative ``".module:attr"`` reference or an import statement instead (setup.py rewrites
    those)."""
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for line, text in _strings(ast.parse(path.read_text("utf-8")))
        if _names_a_renamed_package(text)
    ]
    assert found == []


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("consumers.rule_candidates:build", True),
        ("producers.work", True),
        ("contracts.work", True),
        ("contracts:EventSpec", True),
        ("consumers", False),  # a word (the console's consumers page)
        ("consumers.html", False),  # a file name
        ("consumer lag", False),
        ("spectral.cli.dev:app", False),
        (".api:router", False),
        ("producers_x", False),
    ],
)
def test_strings_that_name_a_renamed_package_are_recognised(text: str, names: bool) -> None:
    assert _names_a_renamed_package(text) is names
