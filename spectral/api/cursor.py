"""Opaque pagination cursors: base64url of a small JSON object and its HMAC, checked when read.

A cursor names the position after the last row of a page (a keyset, never an offset, so rows
inserted meanwhile do not shift pages) and the kind of listing it belongs to. It is signed with
the surfaces' cursor key (HMAC-SHA-256, ``core.surface_keys`` or ``SPECTRAL_CURSOR_KEY``), so a
client can neither write one by hand nor alter one it was given: anything but a cursor a listing
of this deployment handed out is a 400 ``invalid-cursor``. Every replica reads the same key, so
a cursor from one pages on another.

The keyset's values are still checked against the type the listing's query binds them as (a
bigint in range, a plain decimal, a hyphenated UUID, a UTC-convertible timestamp) before they
reach the database: a leaked key must not turn into a driver error (a 500) either.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final
from uuid import UUID

import orjson

from spectral.api.problems import ProblemError, ProblemType

_MAX_CHARS: Final = 512
_MAC_BYTES: Final = 16
_BIGINT: Final = 2**63
_DECIMAL: Final = re.compile(r"-?[0-9]{1,20}(\.[0-9]{1,12})?")
_UUID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_PART: Final = re.compile(r"[A-Za-z0-9_-]+")
MIN_KEY_BYTES: Final = 16

Field = Callable[[Any], Any]
"""Checks and converts one value of a keyset; raises ValueError (or TypeError) when it is not
a value the listing could have written."""


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    """The bytes of unpadded base64url ``text`` in its one canonical spelling (a last character
    whose unused bits are set would decode to the same bytes: an altered cursor that reads)."""
    if not _PART.fullmatch(text):
        raise ValueError("not base64url")
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64(raw) != text:
        raise ValueError("not canonical base64url")
    return raw


def _invalid() -> ProblemError:
    return ProblemError(
        400,
        "the cursor is not one this listing returned (pass next_cursor unchanged, with the "
        "same sort)",
        slug=ProblemType.INVALID_CURSOR,
    )


class Cursors:
    """Signs the cursors listings hand out and reads them back (the key never leaves it)."""

    def __init__(self, key: bytes) -> None:
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(f"a cursor key has at least {MIN_KEY_BYTES} bytes")
        self._key = key

    def __repr__(self) -> str:
        return "Cursors(key=<hidden>)"

    def _mac(self, body: bytes) -> bytes:
        return hmac.new(self._key, body, hashlib.sha256).digest()[:_MAC_BYTES]

    def encode(self, kind: str, key: list[Any]) -> str:
        """The cursor of the position ``key`` in the listing ``kind``."""
        body = orjson.dumps({"k": kind, "p": key})
        return f"{_b64(body)}.{_b64(self._mac(body))}"

    def decode(self, cursor: str, kind: str, arity: int) -> list[Any]:
        """The keyset of ``cursor``; 400 invalid-cursor unless this deployment signed it for
        the listing ``kind``."""
        value = None
        if len(cursor) <= _MAX_CHARS and cursor.isascii():
            body_text, dot, mac_text = cursor.partition(".")
            try:
                body, mac = _unb64(body_text), _unb64(mac_text)
            except (ValueError, binascii.Error):
                raise _invalid() from None
            if dot and hmac.compare_digest(mac, self._mac(body)):
                try:
                    value = orjson.loads(body)
                except orjson.JSONDecodeError:
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

    def decode_keyset(self, cursor: str, kind: str, *fields: Field) -> tuple[Any, ...]:
        """The keyset of ``cursor``, each value checked and converted by its field (in
        order)."""
        key = self.decode(cursor, kind, len(fields))
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
