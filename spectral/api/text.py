"""Text an operator can trust: characters that change how text is shown without being seen.

Evidence, signatures, notes and names come from producers and other operators. Bidirectional
controls (U+202E RIGHT-TO-LEFT OVERRIDE can show ``exe.txt`` as ``txt.exe``), zero-width and
other format characters (U+200B, U+200D, U+FEFF), control characters, line and paragraph
separators and private-use or unassigned code points are escaped by HTML escaping no more
than letters are: a page would render them, silently. So:

* the console shows each of them as a visible mark, ``⟨U+202E⟩``, in a highlighted span whose
  title names the character (:func:`reveal`, the templates' ``visible`` filter);
* the API keeps text as it was sent and flags where such characters are
  (:func:`hidden_characters`), so a client can show them too.

Tabs and line feeds are ordinary layout and are left alone.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from typing import Final

from markupsafe import Markup, escape

_HIDDEN_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_LAYOUT: Final = frozenset("\t\n\r")


def is_hidden(char: str) -> bool:
    """Whether ``char`` changes or hides text without being seen."""
    return char not in _LAYOUT and unicodedata.category(char) in _HIDDEN_CATEGORIES


def mark(char: str) -> str:
    """The visible mark of a hidden character, e.g. ``⟨U+202E⟩``."""
    return f"⟨U+{ord(char):04X}⟩"


def hidden_in(text: str) -> list[str]:
    """The hidden characters of ``text`` as ``U+XXXX``, each once, in order of appearance."""
    seen: dict[str, None] = {}
    for char in text:
        if is_hidden(char):
            seen.setdefault(f"U+{ord(char):04X}", None)
    return list(seen)


def reveal(value: object) -> Markup:
    """``value`` as HTML: escaped, each hidden character replaced by its mark in a span the
    stylesheet highlights (its title names the character)."""
    text = "" if value is None else str(value)
    if not any(is_hidden(char) for char in text):
        return escape(text)
    parts: list[str] = []
    for char in text:
        if is_hidden(char):
            name = unicodedata.name(char, "unnamed or unassigned character")
            parts.append(f'<span class="hidden-char" title="{escape(name)}">{mark(char)}</span>')
        else:
            parts.append(str(escape(char)))
    return Markup("".join(parts))  # noqa: S704 - every part is escaped above


def hidden_characters(fields: dict[str, object]) -> Iterator[dict[str, object]]:
    """For each ``{location: text}`` holding hidden characters: ``{"location": ..., "code_points":
    [...]}`` (what the API's details list under ``hidden_characters``)."""
    for location, value in fields.items():
        if isinstance(value, str):
            found = hidden_in(value)
            if found:
                yield {"location": location, "code_points": found}
