"""Opaque pagination cursors: base64url of a small JSON object, checked when read back.

A cursor names the position after the last row of a page (a keyset, never an offset, so rows
inserted meanwhile do not shift pages) and the kind of listing it belongs to.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Final

import orjson

from spectral.api.problems import ProblemError

_MAX_CHARS: Final = 512


def encode_cursor(kind: str, key: list[Any]) -> str:
    raw = orjson.dumps({"k": kind, "p": key})
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode_cursor(cursor: str, kind: str, arity: int) -> list[Any]:
    """The keyset of ``cursor``; 400 invalid-cursor when it was not made by this listing."""
    value = None
    if len(cursor) <= _MAX_CHARS:
        padded = cursor + "=" * (-len(cursor) % 4)
        try:
            value = orjson.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
        except (ValueError, binascii.Error, UnicodeError):
            value = None
    if (
        not isinstance(value, dict)
        or value.get("k") != kind
        or not isinstance(value.get("p"), list)
        or len(value["p"]) != arity
    ):
        raise ProblemError(
            400,
            "the cursor is not one this listing returned (pass next_cursor unchanged, with the "
            "same sort)",
            slug="invalid-cursor",
        )
    key: list[Any] = value["p"]
    return key
