"""Generators of the reference pages: each page is rendered from the code, committed, and checked.

``python -m docs.gen`` writes every page; ``python -m docs.gen --check`` exits 1 and prints a
diff when a committed page differs from what the code would generate (a test runs the check).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Final

DOCS: Final = Path(__file__).resolve().parent.parent
ROOT: Final = DOCS.parent
GENERATED: Final = (
    "<!-- Generated from the code by `python -m docs.gen` (`make docs-generate`); "
    "do not edit: a test fails when this page differs from what the code would generate. -->"
)


def pages() -> dict[str, Callable[[], str]]:
    """Each generated page (its path under docs/) and the function that renders it."""
    from docs.gen import (  # noqa: PLC0415 - heavy
        alerts,
        cli,
        events,
        http,
        imports,
        mcp,
        metrics,
        performance,
        settings,
    )

    return {
        "reference/settings.md": settings.render,
        "reference/cli.md": cli.render,
        "reference/metrics.md": metrics.render,
        "reference/http-api.md": http.render,
        "reference/openapi.json": http.render_json,
        "reference/mcp-tools.md": mcp.render,
        "reference/alerts.md": alerts.render,
        "reference/events.md": events.render,
        "reference/import-graph.md": imports.render,
        "explanation/performance.md": performance.render,
    }
