"""Runtime files that ship with spectral, read as package resources.

The top-level ``schemas/`` folder (append-only migrations in ``sql/``, the published event
schemas and test vectors in ``events/``) is packaged as the resource package ``spectral_schemas``
(``pyproject.toml``: ``package-dir``). Reading it through :mod:`importlib.resources` gives the
same files from a source checkout, an editable install and an installed wheel — never a path
computed from ``__file__``, which points nowhere useful once installed.
"""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Final

SCHEMAS_PACKAGE: Final = "spectral_schemas"


def schemas_root() -> Traversable:
    """The ``schemas/`` folder as shipped."""
    return resources.files(SCHEMAS_PACKAGE)


def migrations() -> Traversable:
    """``schemas/sql``: the migrations, ``NNNN_name.sql``."""
    return schemas_root() / "sql"


def event_schemas() -> Traversable:
    """``schemas/events``: the published JSON Schemas (and ``vectors/``)."""
    return schemas_root() / "events"


def source_event_schemas() -> Path | None:
    """``schemas/events`` of a source checkout (editable install), or None when spectral runs
    from an installed wheel: generated files are written into a checkout, never into
    site-packages."""
    root = schemas_root()
    if not isinstance(root, Path):
        return None
    if not (root.resolve().parent / "pyproject.toml").is_file():
        return None
    return root / "events"
