"""Small helpers shared by the generators: escaping for tables and inline code."""

from __future__ import annotations

import re

_SPACES = re.compile(r"\s+")


def cell(text: str) -> str:
    """``text`` as one Markdown table cell: one line, pipes escaped."""
    return _SPACES.sub(" ", text).strip().replace("|", "\\|")


def code(text: str) -> str:
    """``text`` as inline code, whatever backticks it holds."""
    fence = "``" if "`" in text else "`"
    pad = " " if "`" in text else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def anchor(text: str) -> str:
    """The anchor MkDocs gives a heading of this text (python-markdown's toc slugify)."""
    from markdown.extensions.toc import slugify  # noqa: PLC0415 - only when rendering

    return str(slugify(text, "-"))


def with_rules(meaning: str, rules: str) -> str:
    """A field's meaning followed by its validation rules, as one sentence."""
    if not rules:
        return meaning
    if not meaning:
        return rules[0].upper() + rules[1:] + "."
    return f"{meaning.rstrip('.')} ({rules})."
