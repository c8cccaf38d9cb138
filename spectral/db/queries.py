"""Named SQL blocks loaded from ``.sql`` files.

A file holds blocks that each start with a ``-- name: query_name`` line; the block runs to the
next such line. Repositories load their file once and refer to queries by name, so SQL stays in
SQL files where it can be read, linted and reviewed as SQL.

A block may include another block of the same file: ``{other_query}``, a name of that file in
braces with nothing else between them, stands for that block's text (its own includes put in),
wherever it stands in the block, comments included; it is put in when the file is parsed, so
the loaded query is the whole statement. Blocks that include each other in a cycle (a block
naming itself included) are refused. Any other braces are left exactly as written: ``{}``,
``{0}`` or ``{partition}`` in a block with no query of that name stay for the ``str.format``
its caller applies, and ``'{}'`` or ``'{1,2}'`` are SQL literals.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path

_NAME = re.compile(r"^--\s*name:\s*([A-Za-z_][A-Za-z0-9_]*)\s*$", re.MULTILINE)
_INCLUDE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def parse_queries(text: str) -> dict[str, str]:
    """Split ``text`` into {name: statement}, each block's includes put in; duplicate names,
    empty blocks and includes in a cycle are errors."""
    matches = list(_NAME.finditer(text))
    blocks: dict[str, str] = {}
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        body = text[match.end() : end].strip()
        name = match.group(1)
        if name in blocks:
            raise ValueError(f"query {name!r} is defined twice")
        if not body:
            raise ValueError(f"query {name!r} is empty")
        blocks[name] = body
    return _include(blocks)


def _include(blocks: Mapping[str, str]) -> dict[str, str]:
    """Each block with the braced names of other blocks replaced by their (included) texts."""
    done: dict[str, str] = {}

    def resolve(name: str, within: tuple[str, ...]) -> str:
        if name in done:
            return done[name]
        if name in within:
            cycle = " -> ".join((*within[within.index(name) :], name))
            raise ValueError(f"queries include each other in a cycle: {cycle}")

        def put_in(match: re.Match[str]) -> str:
            other = match.group(1)
            return resolve(other, (*within, name)) if other in blocks else match.group(0)

        done[name] = _INCLUDE.sub(put_in, blocks[name])
        return done[name]

    return {name: resolve(name, ()) for name in blocks}


@cache
def load_queries(path: Path) -> Mapping[str, str]:
    """Parse the named queries (``-- name: x`` blocks) of one ``.sql`` file, cached per path.
    ``{other}``, where ``other`` is a query of the same file, stands for that query's text;
    other braces are left as written."""
    return parse_queries(path.read_text(encoding="utf-8"))
