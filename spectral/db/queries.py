"""Named SQL blocks loaded from ``.sql`` files.

A file holds blocks that each start with a ``-- name: query_name`` line; the block runs to the
next such line. Repositories load their file once and refer to queries by name, so SQL stays in
SQL files where it can be read, linted and reviewed as SQL.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path

_NAME = re.compile(r"^--\s*name:\s*([A-Za-z_][A-Za-z0-9_]*)\s*$", re.MULTILINE)


def parse_queries(text: str) -> dict[str, str]:
    """Split ``text`` into {name: statement}; duplicate names are an error."""
    matches = list(_NAME.finditer(text))
    queries: dict[str, str] = {}
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        body = text[match.end() : end].strip()
        name = match.group(1)
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        if not body:
            raise ValueError(f"query {name!r} is empty")
        queries[name] = body
    return queries


@cache
def load_queries(path: Path) -> Mapping[str, str]:
    """Parse the named queries of one ``.sql`` file (cached per path)."""
    return parse_queries(path.read_text(encoding="utf-8"))
