"""Text PostgreSQL can store, and lossless forms of text it cannot. Pure.

PostgreSQL refuses two things a Python ``str`` (and so a model's answer, a gateway's error body
or a model name) may hold: U+0000, which neither ``text`` nor ``jsonb`` accepts, and a lone
surrogate (U+D800..U+DFFF unpaired), which is not UTF-8 at all — the driver cannot even send
it. A value carrying either fails its whole statement, and with it the transaction.

Two forms are offered, and every writer that stores text it did not make chooses one:

* ``escape_text`` — for diagnostics (error messages, validation reports): each offending code
  point is written as the visible JSON-style escape ``\\u0000`` / ``\\udXXX``; readable, and
  different from the original only where the original could not be stored;
* ``encode_text`` / ``decode_text`` — for what was paid for (a model's answer, a name a gateway
  returned): the field keeps its escaped, readable form, and beside it ``<name>_base64`` holds
  the exact code points (UTF-8 with surrogates passed through, base64) and ``<name>_encoding``
  names that encoding, so ``decode_text`` gives back the original string, bit for bit;
* ``replace_unstorable`` — for text shown to people and carried on (a model-written rule stub):
  each offending code point becomes U+FFFD, the replacement character;
* ``storable_json`` — the safety net applied to a whole JSON value before it is written: every
  key and string that cannot be stored is escaped, so no payload can fail its statement.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import Any, Final

TEXT_ENCODING: Final = "utf-8+surrogatepass/base64"
"""``<name>_encoding`` of a text kept as its exact code points."""

BYTES_ENCODING: Final = "base64"
"""``<name>_encoding`` of raw bytes (e.g. an HTTP body)."""

_UNSTORABLE: Final = re.compile("[\x00\ud800-\udfff]")


def is_storable(text: str) -> bool:
    """True when PostgreSQL ``text`` and ``jsonb`` accept ``text`` as it is."""
    return _UNSTORABLE.search(text) is None


def escape_text(text: str) -> str:
    """``text`` with U+0000 and every surrogate code point written as ``\\uXXXX``.

    (Paired surrogates cannot occur in a Python ``str``: a surrogate found here is alone.)"""
    if is_storable(text):
        return text
    return _UNSTORABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def replace_unstorable(text: str, replacement: str = "\ufffd") -> str:
    """``text`` for display where it is stored as text: each code point that cannot be stored
    becomes ``replacement`` (U+FFFD, the replacement character, by default)."""
    if is_storable(text):
        return text
    return _UNSTORABLE.sub(replacement, text)


def encode_text(name: str, text: str) -> dict[str, str]:
    """The fields that store ``text`` under ``name`` losslessly (see the module docstring)."""
    if is_storable(text):
        return {name: text}
    raw = base64.b64encode(text.encode("utf-8", "surrogatepass")).decode("ascii")
    return {name: escape_text(text), f"{name}_base64": raw, f"{name}_encoding": TEXT_ENCODING}


def encode_bytes(name: str, data: bytes, excerpt_chars: int = 2000) -> dict[str, str]:
    """Raw bytes under ``<name>_base64`` (lossless), with a readable ``<name>_excerpt``."""
    excerpt = escape_text(data[: excerpt_chars * 4].decode("utf-8", "replace")[:excerpt_chars])
    return {
        f"{name}_base64": base64.b64encode(data).decode("ascii"),
        f"{name}_encoding": BYTES_ENCODING,
        f"{name}_excerpt": excerpt,
    }


def decode_text(payload: Mapping[str, Any], name: str) -> str | None:
    """The original text stored under ``name`` by ``encode_text`` (None when absent)."""
    raw = payload.get(f"{name}_base64")
    if isinstance(raw, str) and payload.get(f"{name}_encoding") == TEXT_ENCODING:
        return base64.b64decode(raw).decode("utf-8", "surrogatepass")
    value = payload.get(name)
    return value if isinstance(value, str) else None


def storable_json(value: Any) -> Any:
    """``value`` (a JSON value) with every key and string PostgreSQL cannot store escaped.

    Returns ``value`` itself when nothing needed escaping (no copy on the common path)."""
    if isinstance(value, str):
        return escape_text(value)
    if isinstance(value, Mapping):
        items = [(escape_text(str(k)), storable_json(v)) for k, v in value.items()]
        if all(
            k == old_k and v is old_v
            for (k, v), (old_k, old_v) in zip(items, value.items(), strict=True)
        ):
            return value
        return dict(items)
    if isinstance(value, list | tuple):
        converted = [storable_json(v) for v in value]
        if all(new is old for new, old in zip(converted, value, strict=True)):
            return value
        return converted
    return value
