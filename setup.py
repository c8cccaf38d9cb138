"""Package discovery, and the wheel's namespace; everything else is declared in pyproject.toml.

The source tree keeps the product's top-level folders: ``spectral/`` (the framework),
``contracts/``, ``producers/``, ``consumers/`` and ``schemas/``; code imports them by those names.
An installed wheel must not put packages named ``contracts``, ``producers`` or ``consumers`` into
site-packages, where any other package can take the same names. So a wheel build (``bdist_wheel``:
``pip install .``, ``pip wheel .``, the Dockerfile) ships them as ``spectral.contracts``,
``spectral.producers`` and ``spectral.consumers``:

* the packages are mapped into the namespace (``package_dir``);
* every absolute import of them is rewritten in the built copy, token for token, so each line
  keeps its number (``from contracts.x import y`` -> ``from spectral.contracts.x import y``);
* the targets of the distribution's entry points are rewritten the same way, and its list of
  top-level names lists ``spectral`` and ``spectral_schemas`` only.

No code names those packages in a string (a unit test holds it): what the import rewrite does not
see would point nowhere once installed. A source checkout and an editable install keep the folder
names, so mypy, ruff and every editor read the code as it is written.

``native/`` is the Rust source of ``contracts._wire`` (``spectral.contracts._wire`` in a wheel), the
failure-cluster record's fast contract check, built by setuptools-rust with cargo; it is optional
to the build: without a Rust toolchain the package installs without it and the same check runs in
Python (``contracts/failure_cluster.py``), slower. ``make install`` requires the toolchain.

``schemas/`` ships as the resource package ``spectral_schemas`` in both (read through
importlib.resources, spectral/resources.py). Folders that hold only data (templates, static
files, the migrations) are namespace packages, so they are discovered and listed like any other
package and their files ship as package data.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import Any

from setuptools import find_namespace_packages, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py
from setuptools_rust import Binding, RustExtension

NAMESPACE = "spectral"
SCHEMAS = "spectral_schemas"
"""The top-level schemas/ folder's package (its place is fixed by the product brief)."""
RENAMED = ("contracts", "producers", "consumers")
WHEEL = "bdist_wheel" in sys.argv[1:]
"""A wheel is being built (not an editable install, not the metadata of one)."""

_REFERENCE = re.compile(rf"^(\s*)({'|'.join(RENAMED)})([.:]|\s*$)")


def _renamed(module: str | None) -> bool:
    return module is not None and module.split(".", 1)[0] in RENAMED


def namespaced(source: str) -> str:
    """``source`` with every absolute import of a renamed package moved into the namespace;
    the text changes only inside the import statements' first lines."""
    lines = source.splitlines(keepends=True)
    for node in ast.walk(ast.parse(source)):
        index = node.lineno - 1 if isinstance(node, ast.Import | ast.ImportFrom) else -1
        if isinstance(node, ast.ImportFrom) and node.level == 0 and _renamed(node.module):
            lines[index] = re.sub(
                rf"\bfrom(\s+)({'|'.join(RENAMED)})\b",
                rf"from\1{NAMESPACE}.\2",
                lines[index],
                count=1,
            )
        elif isinstance(node, ast.Import) and any(_renamed(a.name) for a in node.names):
            lines[index] = _rewrite_import(node, lines[index])
    return "".join(lines)


def _rewrite_import(node: ast.Import, line: str) -> str:
    """``import contracts`` -> ``from spectral import contracts``; ``import contracts.x as y`` ->
    ``import spectral.contracts.x as y``; ``import contracts.x`` -> the same plus the name
    ``contracts`` bound (on the same line)."""
    if node.end_lineno != node.lineno:
        raise ValueError(f"line {node.lineno}: a multi-line import of a renamed package")
    parts = []
    for alias in node.names:
        if not _renamed(alias.name):
            parts.append(f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else ""))
        elif alias.asname:
            parts.append(f"import {NAMESPACE}.{alias.name} as {alias.asname}")
        elif "." not in alias.name:
            parts.append(f"from {NAMESPACE} import {alias.name}")
        else:
            top = alias.name.split(".", 1)[0]
            parts.append(f"import {NAMESPACE}.{alias.name}; from {NAMESPACE} import {top}")
    start, end = node.col_offset, node.end_col_offset
    return line[:start] + "; ".join(parts) + line[end:]


def namespaced_reference(value: str) -> str:
    """An entry point's ``module:attribute`` moved into the namespace when its package is."""
    return _REFERENCE.sub(rf"\1{NAMESPACE}.\2\3", value, count=1)


class BuildPy(build_py):
    """Rewrites the imports of the built copy of each module (a wheel only)."""

    def run(self) -> None:
        super().run()
        if not WHEEL:
            return
        for output in self.get_outputs(include_bytecode=False):
            path = Path(output)
            if path.suffix == ".py":
                text = path.read_text("utf-8")
                changed = namespaced(text)
                if changed != text:
                    path.write_text(changed, "utf-8")


class BdistWheel(bdist_wheel):
    """Rewrites the wheel's entry points and top-level names before it is archived (whether its
    metadata was prepared apart, as pip does, or made here)."""

    def write_wheelfile(self, wheelfile_base: str, *args: Any, **kwargs: Any) -> None:
        if WHEEL:  # an editable install's wheel is written here too: it keeps the folder names
            _namespace_metadata(Path(wheelfile_base))
        super().write_wheelfile(wheelfile_base, *args, **kwargs)


def _namespace_metadata(base: Path) -> None:
    """The dist-info folder ``base`` with its entry points and top-level names namespaced."""
    entry_points = base / "entry_points.txt"
    if entry_points.is_file():
        entry_points.write_text(namespaced_entry_points(entry_points.read_text("utf-8")))
    top_level = base / "top_level.txt"
    if top_level.is_file():
        names = [n for n in top_level.read_text("utf-8").split() if n not in RENAMED]
        top_level.write_text("".join(f"{name}\n" for name in names))


def namespaced_entry_points(text: str) -> str:
    """An ``entry_points.txt`` with each target moved into the namespace when its package is."""
    lines = []
    for line in text.splitlines(keepends=True):
        name, sep, value = line.partition("=")
        entry = sep and not line.lstrip().startswith(("[", "#", ";"))
        lines.append(f"{name}= {namespaced_reference(value.strip())}\n" if entry else line)
    return "".join(lines)


def packages() -> tuple[list[str], dict[str, str]]:
    """The import packages and where their folders are: the renamed ones inside the namespace
    when a wheel is built, at the top level otherwise."""
    schemas = [SCHEMAS, *(f"{SCHEMAS}.{p}" for p in find_namespace_packages(where="schemas"))]
    framework = find_namespace_packages(include=["spectral*"])
    features = find_namespace_packages(include=[f"{name}*" for name in RENAMED])
    if not WHEEL:
        return [*framework, *features, *schemas], {SCHEMAS: "schemas"}
    return (
        [*framework, *(f"{NAMESPACE}.{p}" for p in features), *schemas],
        {SCHEMAS: "schemas", **{f"{NAMESPACE}.{name}": name for name in RENAMED}},
    )


if __name__ == "__main__":
    found, where = packages()
    setup(
        packages=found,
        package_dir=where,
        cmdclass={"build_py": BuildPy, "bdist_wheel": BdistWheel},
        rust_extensions=[
            RustExtension(
                f"{NAMESPACE}.contracts._wire" if WHEEL else "contracts._wire",
                path="native/Cargo.toml",
                binding=Binding.PyO3,
                optional=True,
                debug=False,  # an editable install too: the debug build is ~10x slower
            )
        ],
    )
