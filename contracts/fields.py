"""Field types shared by the envelope and the payloads, with their exact wire formats.

Timestamps (:data:`UtcDatetime`)
    Written as ``YYYY-MM-DDTHH:MM:SS.ffffffZ``: UTC, always six fractional digits, upper-case
    ``T`` and ``Z`` (e.g. ``2026-11-21T10:00:00.123000Z``). Read: any RFC 3339 ``date-time``
    (``T``/``t`` separator, ``Z``/``z`` or a ``+HH:MM``/``-HH:MM`` offset, one or more
    fractional digits) whose year, as written, lies in :data:`MIN_YEAR` .. :data:`MAX_YEAR`;
    the value is converted to UTC and digits below the microsecond are truncated (never
    rounded: rounding could carry into the next second, day or year and past the bound, and
    truncation keeps order: a <= b implies trunc(a) <= trunc(b)). Refused: numbers (Unix
    times), naive times (no offset), date-only or minute-only text, leap seconds (``:60``),
    offsets beyond ``23:59``, years outside the bound. :data:`RFC3339_PATTERN` says exactly
    the same (tests hold the two equal). In a model, text in the written form is read inside
    pydantic-core (no Python frame) and anything else by :func:`parse_utc`; a refusal is one
    error type, :data:`TIMESTAMP_ERROR`, whose exact reason :func:`timestamp_refusal` gives.
UUIDs (:data:`Uuid`)
    Exactly one spelling on the wire: lowercase hex, hyphenated ``8-4-4-4-12``. Other spellings
    (upper case, no hyphens, braces, ``urn:uuid:``) are refused, not normalised: the snapshot
    hash is taken over the wire text, so two spellings of one UUID would give one snapshot two
    hashes, and keys built from UUIDs would differ from the text a producer wrote. The spelling
    is checked by a Rust regular expression inside pydantic-core; ``uuid.UUID`` objects built
    in Python are taken as they are; anything else (bytes, numbers) is refused.
Integers
    JSON integers in the I-JSON range (magnitude at most 2**53 - 1), written without a
    fraction or an exponent: ``true``/``false``, ``5.0``, ``5e0`` and numeric strings are
    refused.
Text
    No string anywhere in a record (values, member names, unknown fields) may contain U+0000:
    PostgreSQL ``text`` and ``jsonb`` cannot hold it, nor can C strings. Records are checked
    as a whole (:func:`contracts.wire.find_nul`); :data:`NO_NUL_PATTERN` says it per string in
    the JSON Schemas.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Annotated, Final
from uuid import UUID

from pydantic import (
    Field,
    GetPydanticSchema,
    PlainSerializer,
    StringConstraints,
    WithJsonSchema,
)
from pydantic_core import core_schema

from contracts.canonical import MAX_SAFE_INTEGER

MIN_YEAR: Final = 1970
"""Earliest year a timestamp may be written with (nothing this project records predates the
Unix epoch; earlier years are zero values and epoch bugs)."""
MAX_YEAR: Final = 9998
"""Latest year a timestamp may be written with: year 9999 holds the 'infinity' sentinels of
many libraries (Python's datetime.max, which asyncpg stores as PostgreSQL ``infinity``), and
with any offset a year-9998 time stays below them once converted to UTC."""

NO_NUL_PATTERN: Final = "^[^\\x00]*$"
"""A string without U+0000, as a JSON Schema / ECMAScript pattern."""
UUID_PATTERN: Final = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
"""The one UUID spelling of the wire contract, as a JSON Schema / ECMAScript pattern."""

_YEAR: Final = "(19[7-9][0-9]|[2-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8])"
_LEAP_YEAR: Final = (
    "(19(7[26]|8[048]|9[26])|[2-9][0-9](0[48]|[2468][048]|[13579][26])|([2468][048]|[3579][26])00)"
)
_DAY_31: Final = "(0[1-9]|[12][0-9]|3[01])"
_DAY_30: Final = "(0[1-9]|[12][0-9]|30)"
_DATE: Final = (
    f"({_YEAR}-((0[13578]|1[02])-{_DAY_31}|(0[469]|11)-{_DAY_30}|02-(0[1-9]|1[0-9]|2[0-8]))"
    f"|{_LEAP_YEAR}-02-29)"
)
_TIME: Final = r"([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?"
_OFFSET: Final = "([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
RFC3339_PATTERN: Final = f"^{_DATE}[Tt]{_TIME}{_OFFSET}$"
"""RFC 3339 ``date-time`` (section 5.6) within the year bound, as a JSON Schema / ECMAScript
pattern: the calendar (month lengths, leap years), hours, minutes, seconds (no leap second)
and offsets are all checked, so a validator needs no ``format`` support."""
_EXAMPLE: Final = "2026-11-21T10:00:00.123456Z"
_MIN_RFC3339_CHARS: Final = 20  # 2026-11-21T10:00:00Z
_SECONDS_END: Final = 19  # index just after the seconds
_WRITTEN_CHARS: Final = 27  # len("2026-11-21T10:00:00.123456Z"), the form format_utc writes
_WRITTEN_SEPARATORS: Final = "--T::."  # characters 4, 7, 10, 13, 16 and 19 of that form


def parse_utc(value: object) -> datetime:
    """An aware UTC datetime from RFC 3339 text or an aware datetime; ValueError otherwise.

    The layout checks of :func:`_rfc3339_layout` plus ``datetime.fromisoformat`` (which checks
    the digits and ranges) accept exactly :data:`RFC3339_PATTERN`, at a third of the cost of the
    regular expression. Text in the written form (``YYYY-MM-DDTHH:MM:SS.ffffffZ``) takes a
    shorter path: the same checks specialised to that one layout. The :data:`UtcDatetime` field
    reads the written form without calling this function (a Rust regular expression, then
    ``fromisoformat``: the same value); everything else comes here. (A memo of recently read
    text was tried and dropped: hashing fresh text and missing the cache on a large dict cost as
    much as the parse it saved.)
    """
    if isinstance(value, str):
        if _written_layout(value):
            return datetime.fromisoformat(value)  # tzinfo is UTC: it reads Z as UTC
        if not _rfc3339_layout(value):
            raise ValueError(f"expected an RFC 3339 date-time such as {_EXAMPLE}")
        if not _MIN_YEAR_TEXT <= value[:4] <= _MAX_YEAR_TEXT:
            raise ValueError(f"the year must lie in {MIN_YEAR}..{MAX_YEAR}")
        upper_z = value[:-1] + "Z" if value[-1] == "z" else value  # fromisoformat needs Z
        return _bounded(_to_utc(datetime.fromisoformat(upper_z)))
    if isinstance(value, datetime):
        return _bounded(_to_utc(value))
    raise ValueError(f"expected an RFC 3339 date-time string such as {_EXAMPLE}")


def _written_layout(value: str) -> bool:
    """``value`` has the written form's layout (``YYYY-MM-DDTHH:MM:SS.ffffffZ``) with a year in
    the bound: a case of :func:`_rfc3339_layout` (``fromisoformat`` checks the rest)."""
    return (
        len(value) == _WRITTEN_CHARS
        and value[-1] == "Z"
        and value[4:20:3] == _WRITTEN_SEPARATORS
        and value[20:26].isdigit()
        and value.isascii()
        and "\x00" not in value
        and _MIN_YEAR_TEXT <= value < _YEAR_AFTER_MAX_TEXT  # compares the first 4 characters
    )


def written_utc(value: object) -> datetime | None:
    """The instant of a timestamp in the written form (``YYYY-MM-DDTHH:MM:SS.ffffffZ``, the
    form spectral writes), or None for anything else — which may still be a timestamp the
    contract accepts in another form (:func:`parse_utc` decides). Whatever this accepts, the
    :data:`UtcDatetime` field accepts with the same value: the fast path of readers that
    validate without building models (``EventSpec.read_view``)."""
    if type(value) is not str or not _written_layout(value):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


_UUID_HEX: Final = b"0123456789abcdef"
_UUID_DASHES: Final = "----"


def is_wire_uuid(value: object) -> bool:
    """``value`` is text in the one UUID spelling (:data:`UUID_PATTERN`: lowercase hex,
    hyphenated 8-4-4-4-12), checked without a regular expression: the four hyphens where the
    pattern puts them, and nothing but lowercase hex digits besides them."""
    return (
        type(value) is str
        and len(value) == _UUID_CHARS
        and value[8:24:5] == _UUID_DASHES
        and value.isascii()
        and value.encode().translate(None, _UUID_HEX) == b"----"
    )


_UUID_CHARS: Final = 36
_HEX_AS_ZERO: Final = bytes.maketrans(b"123456789abcdef", b"0" * 15)
"""Every lowercase hex digit as ``0``, every other byte as itself (``bytes.translate``)."""
_DIGITS_AS_ZERO: Final = bytes.maketrans(b"123456789", b"0" * 9)
"""Every decimal digit as ``0``, every other byte as itself."""
_UUID_LAYOUT: Final = b"00000000-0000-0000-0000-000000000000"
_WRITTEN_LAYOUT: Final = b"0000-00-00T00:00:00.000000Z"
_from_iso: Final = datetime.fromisoformat


def _layouts(layout: bytes, count: int) -> bytes:
    """``count`` copies of ``layout`` joined by spaces (cached for the counts a record has)."""
    return b" ".join([layout] * count)


_WRITTEN_STRIDE: Final = _WRITTEN_CHARS + 1
"""Where each timestamp starts in the written forms joined by spaces."""
_INNER_THOUSANDS: Final = b"2345678"
"""First digits of the years that lie in the bound whatever the other three digits are."""
_UUID_LAYOUTS: Final = [_layouts(_UUID_LAYOUT, count) for count in range(8)]
_WRITTEN_LAYOUTS: Final = [_layouts(_WRITTEN_LAYOUT, count) for count in range(16)]


def are_wire_uuids(values: Sequence[str]) -> bool:
    """Every one of ``values`` (at least one string) is a UUID in its one spelling
    (:func:`is_wire_uuid`), checked at once: the values joined by spaces, as UTF-8, with every
    lowercase hex digit read as ``0`` must be the layout ``00000000-0000-0000-0000-000000000000``
    repeated, joined by spaces (a space, an uppercase digit or a non-ASCII character anywhere
    else breaks it, and so does any piece of another length)."""
    count = len(values)
    layout = _UUID_LAYOUTS[count] if count < len(_UUID_LAYOUTS) else _layouts(_UUID_LAYOUT, count)
    return " ".join(values).encode("utf-8", "surrogatepass").translate(_HEX_AS_ZERO) == layout


def written_instants(values: Sequence[str]) -> list[datetime] | None:
    """The instants of ``values`` (at least one string) when every one is a timestamp in the
    written form (:func:`written_utc`), else None: the layout checked at once as
    :func:`are_wire_uuids` does (``0000-00-00T00:00:00.000000Z``, digits read as ``0``), the
    year bound by the least and the greatest text (the layout is fixed, so they hold the least
    and the greatest year) unless every year's first digit is 2 to 8 (the joined text's every
    28th byte: a year from 2000 to 8999 lies in the bound), ``fromisoformat`` the calendar."""
    count = len(values)
    layout = (
        _WRITTEN_LAYOUTS[count]
        if count < len(_WRITTEN_LAYOUTS)
        else _layouts(_WRITTEN_LAYOUT, count)
    )
    joined = " ".join(values).encode("utf-8", "surrogatepass")
    if joined.translate(_DIGITS_AS_ZERO) != layout or (
        joined[::_WRITTEN_STRIDE].translate(None, _INNER_THOUSANDS)
        and (min(values) < _MIN_YEAR_TEXT or max(values) >= _YEAR_AFTER_MAX_TEXT)
    ):
        return None
    try:
        return list(map(_from_iso, values))
    except ValueError:
        return None


_MIN_YEAR_TEXT: Final = f"{MIN_YEAR:04d}"
_MAX_YEAR_TEXT: Final = f"{MAX_YEAR:04d}"
_YEAR_AFTER_MAX_TEXT: Final = f"{MAX_YEAR + 1:04d}"
EARLIEST: Final = datetime(MIN_YEAR, 1, 1, tzinfo=UTC)
"""The earliest instant a timestamp may denote (inclusive)."""
END: Final = datetime(MAX_YEAR + 1, 1, 1, tzinfo=UTC)
"""The first instant a timestamp may no longer denote."""
EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
"""The Unix epoch, the origin of :func:`epoch_micros`."""
_MICROSECOND: Final = timedelta(microseconds=1)


def epoch_micros(moment: datetime) -> int:
    """``moment`` (an aware datetime) as whole microseconds since the Unix epoch: exact for every
    datetime (a float timestamp is not, past 2**53 microseconds: the year 2255)."""
    return (moment - EPOCH) // _MICROSECOND


def from_epoch_micros(micros: int) -> datetime:
    """The UTC datetime ``micros`` microseconds after the Unix epoch (:func:`epoch_micros`'s
    inverse)."""
    return EPOCH + timedelta(microseconds=micros)


def timestamp_refusal(value: object) -> str:
    """Why :func:`parse_utc` refuses ``value``, as pydantic words a validator's ValueError (the
    timestamp field reports one error type, :data:`TIMESTAMP_ERROR`, whatever the reason)."""
    try:
        parse_utc(value)
    except ValueError as exc:
        return f"Value error, {exc}"
    return _TIMESTAMP_MESSAGE  # pragma: no cover - only called for refused values


def _bounded(moment: datetime) -> datetime:
    """``moment`` (UTC) when it lies in EARLIEST .. END: so its written form, in UTC, has a year
    in MIN_YEAR .. MAX_YEAR too and reads back (an offset can move a time across a year)."""
    if EARLIEST <= moment < END:
        return moment
    raise ValueError(
        f"the instant must lie from {format_utc(EARLIEST)} up to (not including) "
        f"{format_utc(END)} once converted to UTC"
    )


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
    ``+HHMM``, ``+HH``, seconds in offsets and offset minutes over 59 (fromisoformat reads
    ``+05:60`` as ``+06:00``). ``fromisoformat`` then checks every digit and range. NUL is
    refused outright: fromisoformat reads its input as a NUL-terminated string and took
    ``...T06:Z\\x00:00.000000Z`` for ``...T06:00:00Z``. Tests hold it equal to
    :data:`RFC3339_PATTERN` over every edit of valid stamps.
    """
    if len(text) < _MIN_RFC3339_CHARS or not text.isascii() or "\x00" in text:
        return False
    offset = len(text) - 1 if text[-1] in "Zz" else len(text) - 6  # where the offset starts
    return (
        text[:4].isdigit()  # the year bound compares these four characters as text
        and text[4] == "-"
        and text[7] == "-"
        and text[10] in "Tt"
        and text[13] == ":"
        and text[16] == ":"
        and (offset == _SECONDS_END or (text[19] == "." and text[20:offset].isdigit()))
        and (
            offset == len(text) - 1
            or (text[offset] in "+-" and text[-3] == ":" and text[-2] in _TENS_OF_MINUTES)
        )
    )


_TENS_OF_MINUTES: Final = "012345"  # fromisoformat reads +05:60 as +06:00


def format_utc(value: datetime) -> str:
    """The wire form of a timestamp: ``YYYY-MM-DDTHH:MM:SS.ffffffZ``."""
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


TIMESTAMP_NOTE: Final = (
    "RFC 3339 date-time with a year from 1970 to 9998 as written. Written in UTC as "
    "YYYY-MM-DDTHH:MM:SS.ffffffZ; read with any offset, converted to UTC, digits below the "
    "microsecond truncated."
)

_WRITTEN_PATTERN: Final = (
    f"^{_YEAR}-[0-9]{{2}}-[0-9]{{2}}T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]\\.[0-9]{{6}}Z$"
)
"""The written form with a year in the bound, as a (Rust) regular expression: every text it
matches takes :func:`parse_utc`'s first path, which returns ``datetime.fromisoformat(text)``."""

TIMESTAMP_ERROR: Final = "rfc3339_timestamp"
"""The pydantic error type of a refused timestamp (:func:`timestamp_refusal` says why exactly)."""
_TIMESTAMP_MESSAGE: Final = (
    f"expected an RFC 3339 date-time string such as {_EXAMPLE} (or an aware, not naive, "
    f"datetime) with a year from {MIN_YEAR} to {MAX_YEAR}, also once converted to UTC"
)

_TIMESTAMP_SCHEMA: Final = core_schema.custom_error_schema(
    core_schema.union_schema(
        [
            # The written form, checked and parsed without a Python frame (a Rust regular
            # expression, then the C function fromisoformat): the same value parse_utc gives.
            core_schema.chain_schema(
                [
                    core_schema.str_schema(pattern=_WRITTEN_PATTERN, strict=True),
                    core_schema.no_info_plain_validator_function(datetime.fromisoformat),
                ]
            ),
            core_schema.no_info_plain_validator_function(parse_utc),  # anything else
        ],
        mode="left_to_right",
    ),
    custom_error_type=TIMESTAMP_ERROR,
    custom_error_message=_TIMESTAMP_MESSAGE,
)

UtcDatetime = Annotated[
    datetime,
    GetPydanticSchema(lambda _source, _handler: _TIMESTAMP_SCHEMA),
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

UUID_ERROR: Final = "uuid_spelling"
"""The pydantic error type of a refused UUID."""
_UUID_MESSAGE: Final = "a UUID is written in lowercase hex, hyphenated 8-4-4-4-12"

_UUID_SCHEMA: Final = core_schema.custom_error_schema(
    core_schema.union_schema(
        [
            # Text in the one spelling (a Rust regular expression), parsed by pydantic-core.
            core_schema.chain_schema(
                [
                    core_schema.str_schema(pattern=UUID_PATTERN, strict=True),
                    core_schema.uuid_schema(),
                ]
            ),
            core_schema.is_instance_schema(UUID),  # built in Python
        ],
        mode="left_to_right",
    ),
    custom_error_type=UUID_ERROR,
    custom_error_message=_UUID_MESSAGE,
)

Uuid = Annotated[
    UUID,
    GetPydanticSchema(lambda _source, _handler: _UUID_SCHEMA),
    WithJsonSchema({"type": "string", "format": "uuid", "pattern": UUID_PATTERN}),
]
"""A UUID, read only from its canonical spelling (see the module docstring)."""

NonEmptyStr = Annotated[str, StringConstraints(min_length=1)]
"""A string with at least one character."""

PositiveInt = Annotated[int, Field(strict=True, ge=1, le=MAX_SAFE_INTEGER)]
"""A JSON integer from 1 to 2**53 - 1."""

NonNegativeInt = Annotated[int, Field(strict=True, ge=0, le=MAX_SAFE_INTEGER)]
"""A JSON integer from 0 to 2**53 - 1."""
