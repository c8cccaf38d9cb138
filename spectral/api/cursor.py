"""Opaque pagination cursors: base64url of a small JSON object, checked when read back.

A cursor names the position after the last row of a page (a keyset, never an offset, so rows
inserted meanwhile do not shift pages) and the kind of listing it belongs to.

A cursor is not signed: a client can forge one. So :func:`decode_keyset` checks each value of
the keyset against the type the listing's query binds it as (a bigint in range, a plain
decimal, a hyphenated UUID, a UTC-convertible timestamp) before it reaches the database: any
other cursor is a 400 ``invalid-cursor``, never a driver error (a 500).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final
from uuid import UUID

import orjson

from spectral.api.problems import ProblemError, ProblemType

_MAX_CHARS: Final = 512
_BIGINT: Final = 2**63
_DECIMAL: Final = re.compile(r"-?[0-9]{1,20}(\.[0-9]{1,12})?")
_UUID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

Field = Callable[[Any], Any]
"""Checks and converts one value of a keyset; raises ValueError (or TypeError) when it is not
a value the listing could have written."""


def encode_cursor(kind: str, key: list[Any]) -> str:
    raw = orjson.dumps({"k": kind, "p": key})
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _invalid() -> ProblemError:
    return ProblemError(
        400,
        "the cursor is not one this listing returned (pass next_cursor unchanged, with the "
        "same sort)",
        slug=ProblemType.INVALID_CURSOR,
    )


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
        raise _invalid()
    key: list[Any] = value["p"]
    return key


def decode_keyset(cursor: str, kind: str, *fields: Field) -> tuple[Any, ...]:
    """The keyset of ``cursor``, each value checked and converted by its field (in order)."""
    key = decode_cursor(cursor, kind, len(fields))
    try:
        return tuple(check(value) for check, value in zip(fields, key, strict=True))
    except (TypeError, ValueError, OverflowError):
        raise _invalid() from None


def bigint(value: Any) -> int:
    """A JSON integer PostgreSQL's bigint holds."""
    if type(value) is not int or not -_BIGINT <= value < _BIGINT:
        raise ValueError("not a bigint")
    return value


def decimal_text(value: Any) -> str:
    """PostgreSQL numeric text as a listing writes it (no exponent, NaN or infinity)."""
    if not isinstance(value, str) or not _DECIMAL.fullmatch(value):
        raise ValueError("not a decimal")
    return value


def uuid_text(value: Any) -> UUID:
    """A UUID in the one spelling listings write (lowercase, hyphenated)."""
    if not isinstance(value, str) or not _UUID.fullmatch(value):
        raise ValueError("not a UUID")
    return UUID(value)


def utc_timestamp(value: Any) -> datetime:
    """An ISO 8601 timestamp with an offset, as an aware UTC datetime."""
    if not isinstance(value, str):
        raise TypeError("not a timestamp")
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        raise ValueError("a timestamp without an offset")
    return moment.astimezone(UTC)
