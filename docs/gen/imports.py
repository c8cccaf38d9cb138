"""The import graph: which package imports which, read from the code (every import statement,
those inside functions included), so the architecture page can show the graph as it is."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path
from typing import Final

from docs.gen import GENERATED, ROOT
from docs.gen.text import code

TOP: Final = ("contracts", "spectral", "producers", "consumers")


def _package(module: str) -> str | None:
    """The package a module counts in: its top folder and the folder below it (``spectral``'s
    own top-level modules count as ``spectral``)."""
    parts = module.split(".")
    if parts[0] not in TOP:
        return None
    if len(parts) >= 2 and (ROOT / parts[0] / parts[1]).is_dir():  # noqa: PLR2004 - two levels
        return ".".join(parts[:2])
    return parts[0]


def _module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def graph() -> dict[str, set[str]]:
    """Package -> the packages its modules import (itself left out)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for top in TOP:
        for path in sorted((ROOT / top).rglob("*.py")):
            module = _module_of(path)
            source = _package(module)
            if source is None:
                continue
            edges.setdefault(source, set())
            for node in ast.walk(ast.parse(path.read_text("utf-8"))):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module]
                for name in names:
                    target = _package(name)
                    if target is not None and target != source:
                        edges[source].add(target)
    return dict(edges)


def render() -> str:
    edges = graph()
    folders: dict[str, set[str]] = defaultdict(set)
    for source, targets in edges.items():
        for target in targets:
            if target.split(".")[0] != source.split(".")[0]:
                folders[source.split(".")[0]].add(target.split(".")[0])
    out = [
        GENERATED,
        "",
        "# Import graph",
        "",
        (
            "Which package imports which, read from every import statement of the code (those "
            "inside functions included). The rule it is held to, and why, is in "
            "[Architecture](../explanation/architecture.md); `tests/unit/test_layers.py` "
            "enforces it."
        ),
        "",
        "## Between the top folders",
        "",
        "| folder | imports |",
        "| --- | --- |",
    ]
    out += [
        f"| {code(top)} | {', '.join(code(t) for t in sorted(folders.get(top, ()))) or '—'} |"
        for top in TOP
    ]
    out += ["", "## Between packages", "", "| package | imports |", "| --- | --- |"]
    out += [
        f"| {code(source)} | {', '.join(code(t) for t in sorted(targets)) or '—'} |"
        for source, targets in sorted(edges.items())
    ]
    return "\n".join(out).rstrip("\n") + "\n"
