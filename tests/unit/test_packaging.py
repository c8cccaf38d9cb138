"""setup.py's build step: a wheel ships contracts/, producers/ and consumers/ inside the spectral
namespace, its imports rewritten token for token (every line keeps its number) and its entry
points with them. tests/integration/test_wheel_install.py installs the result."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Final

import pytest

ROOT: Final = Path(__file__).resolve().parents[2]


def _setup() -> ModuleType:
    spec = importlib.util.spec_from_file_location("spectral_setup", ROOT / "setup.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SETUP: Final = _setup()


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("from contracts import EventSpec\n", "from spectral.contracts import EventSpec\n"),
        ("from producers.work.domain import x\n", "from spectral.producers.work.domain import x\n"),
        (
            "if x:\n    from consumers.a import b  # noqa\n",
            "if x:\n    from spectral.consumers.a import b  # noqa\n",
        ),
        ("import contracts\n", "from spectral import contracts\n"),
        ("import contracts.work as w\n", "import spectral.contracts.work as w\n"),
        (
            "import os, contracts.work\n",
            "import os; import spectral.contracts.work; from spectral import contracts\n",
        ),
        ("from spectral.plugins import x\n", "from spectral.plugins import x\n"),
        ("from contractsx import y\n", "from contractsx import y\n"),
        ('x = "from contracts import y"\n', 'x = "from contracts import y"\n'),
        ("from . import contracts\n", "from . import contracts\n"),
    ],
)
def test_imports_move_into_the_namespace_token_for_token(before: str, after: str) -> None:
    assert SETUP.namespaced(before) == after
    assert SETUP.namespaced(after) == after  # a second build changes nothing


def test_a_parenthesised_import_keeps_its_lines() -> None:
    before = "from producers.clusters import (\n    a,\n    b,\n)\nx = 1\n"
    assert SETUP.namespaced(before) == before.replace("from producers", "from spectral.producers")


def test_every_module_of_the_tree_rewrites_to_valid_code_of_the_same_lines() -> None:
    for top in ("spectral", *SETUP.RENAMED):
        for path in (ROOT / top).rglob("*.py"):
            text = path.read_text("utf-8")
            rewritten = SETUP.namespaced(text)
            assert rewritten.count("\n") == text.count("\n"), path
            for node in ast.walk(ast.parse(rewritten)):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    assert node.module.split(".")[0] not in SETUP.RENAMED, (path, node.lineno)
                if isinstance(node, ast.Import):
                    names = [alias.name.split(".")[0] for alias in node.names]
                    assert not set(names) & set(SETUP.RENAMED), (path, node.lineno)


def test_entry_points_and_top_level_names_move_with_them() -> None:
    text = (
        "[console_scripts]\nspectral = spectral.cli:main\n\n[spectral.plugins]\n"
        "triage = consumers.rule_candidates.plugin:PLUGIN\nother = contractsx.y:Z\n"
    )
    assert SETUP.namespaced_entry_points(text) == (
        "[console_scripts]\nspectral = spectral.cli:main\n\n[spectral.plugins]\n"
        "triage = spectral.consumers.rule_candidates.plugin:PLUGIN\nother = contractsx.y:Z\n"
    )
    assert SETUP.namespaced_reference("producers") == "spectral.producers"
