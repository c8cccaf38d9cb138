"""Field types shared by the envelope and the payloads, with their exact wire formats.

Timestamps (:data:`UtcDatetime`)
    Written as ``YYYY-MM-DDTHH:MM:SS.ffffffZ``: UTC, always six fractional digits, upper-case
    ``T`` and ``Z`` (e.g. ``2026-11-21T10:00:00.123000Z``). Read: any RFC 3339 ``date-time``
    (``T``/``t`` separator, ``Z``/``z`` or a ``+HH:MM``/``-HH:MM`` offset, any number of
    fractional digits); the value is converted to UTC and digits below the microsecond are
    dropped. Refused: numbers (Unix times), naive times (no offset), date-only or minute-only
    text, leap seconds (``:60``).
UUIDs
    Written lowercase and hyphenated (``8-4-4-4-12``). Keys built from UUIDs use that spelling.
Integers
    JSON integers in the I-JSON range (magnitude at most 2**53 - 1); ``true``/``false``, floats
    and numeric strings are refused.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Final

from pydantic import Field, PlainSerializer, PlainValidator, StringConstraints, WithJsonSchema

from contracts.canonical import MAX_SAFE_INTEGER

_DATE: Final = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
_TIME: Final = r"[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?"
_OFFSET: Final = r"([Zz]|[+-][0-9]{2}:[0-9]{2})"
RFC3339_PATTERN: Final = f"^{_DATE}[Tt]{_TIME}{_OFFSET}$"
"""RFC 3339 ``date-time`` (section 5.6) as a JSON Schema / ECMAScript pattern."""
_EXAMPLE: Final = "2026-11-21T10:00:00.123456Z"
_MIN_RFC3339_CHARS: Final = 20  # 2026-11-21T10:00:00Z
_SECONDS_END: Final = 19  # index just after the seconds
_WRITTEN_CHARS: Final = 27  # len("2026-11-21T10:00:00.123456Z"), the form format_utc writes
_WRITTEN_SEPARATORS: Final = "--T::."  # characters 4, 7, 10, 13, 16 and 19 of that form


def parse_utc(value: object) -> datetime:
    """An aware UTC datetime from RFC 3339 text or an aware datetime; ValueError otherwise.

    Hot path (up to 13 timestamps per failure-cluster record): the layout checks of
    :func:`_rfc3339_layout` plus ``datetime.fromisoformat`` (which checks the digits and ranges)
    accept exactly :data:`RFC3339_PATTERN`, at a third of the cost of the regular expression.
    Text in the written form (``YYYY-MM-DDTHH:MM:SS.ffffffZ``) takes a shorter path: the same
    checks specialised to that one layout. (A memo of recently read text was tried and dropped:
    hashing fresh text and missing the cache on a large dict cost as much as the parse it saved.)
    """
    if type(value) is str:
        if (  # the written form, a case of the layout below (fromisoformat checks the rest)
            len(value) == _WRITTEN_CHARS
            and value[-1] == "Z"
            and value[4:20:3] == _WRITTEN_SEPARATORS
            and value[20:26].isdigit()
            and value.isascii()
            and "\x00" not in value
        ):
            return datetime.fromisoformat(value)  # tzinfo is UTC: it reads Z as UTC
        if not _rfc3339_layout(value):
            raise ValueError(f"expected an RFC 3339 date-time such as {_EXAMPLE}")
        upper_z = value[:-1] + "Z" if value[-1] == "z" else value  # fromisoformat needs Z
        return _to_utc(datetime.fromisoformat(upper_z))
    if isinstance(value, datetime):
        return _to_utc(value)
    raise ValueError(f"expected an RFC 3339 date-time string such as {_EXAMPLE}")


def _to_utc(parsed: datetime) -> datetime:
    if parsed.tzinfo is UTC:
        return parsed
    if parsed.utcoffset() is None:
        raise ValueError("a naive datetime has no UTC offset; give one (e.g. tzinfo=UTC)")
    try:
        return parsed.astimezone(UTC)
    except OverflowError as exc:
        raise ValueError("the date-time is out of range once converted to UTC") from exc


def _rfc3339_layout(text: str) -> bool:
    """Separators where RFC 3339 puts them, so fromisoformat's ISO 8601 extras are refused:
    basic and week dates, other separators, minutes-only times, comma or empty fractions,
    ``+HHMM``, ``+HH`` and seconds in offsets. ``fromisoformat`` then checks every digit and
    range. NUL is refused outright: fromisoformat reads its input as a NUL-terminated string and
    took ``...T06:Z\\x00:00.000000Z`` for ``...T06:00:00Z``. Tests hold it equal to
    :data:`RFC3339_PATTERN` over every edit of valid stamps.
    """
    if len(text) < _MIN_RFC3339_CHARS or not text.isascii() or "\x00" in text:
        return False
    offset = len(text) - 1 if text[-1] in "Zz" else len(text) - 6  # where the offset starts
    return (
        text[4] == "-"
        and text[7] == "-"
        and text[10] in "Tt"
        and text[13] == ":"
        and text[16] == ":"
        and (offset == _SECONDS_END or (text[19] == "." and text[20:offset].isdigit()))
        and (offset == len(text) - 1 or (text[offset] in "+-" and text[-3] == ":"))
    )


def format_utc(value: datetime) -> str:
    """The wire form of a timestamp: ``YYYY-MM-DDTHH:MM:SS.ffffffZ``."""
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


TIMESTAMP_NOTE: Final = (
    "RFC 3339 date-time. Written in UTC as YYYY-MM-DDTHH:MM:SS.ffffffZ; read with any offset "
    "and converted to UTC."
)

UtcDatetime = Annotated[
    datetime,
    PlainValidator(parse_utc),
    PlainSerializer(format_utc, return_type=str, when_used="json"),
    WithJsonSchema(
        {
            "type": "string",
            "format": "date-time",
            "pattern": RFC3339_PATTERN,
            "description": TIMESTAMP_NOTE,
            "examples": [_EXAMPLE],
        }
    ),
]
"""An aware datetime, always UTC once validated; see the module docstring for the wire form."""

NonEmptyStr = Annotated[str, StringConstraints(min_length=1)]
"""A string with at least one character."""

PositiveInt = Annotated[int, Field(strict=True, ge=1, le=MAX_SAFE_INTEGER)]
"""A JSON integer from 1 to 2**53 - 1."""

NonNegativeInt = Annotated[int, Field(strict=True, ge=0, le=MAX_SAFE_INTEGER)]
"""A JSON integer from 0 to 2**53 - 1."""
