"""The first steps of reading a record: size limit, one JSON parse, an object at the top."""

from __future__ import annotations

from typing import Any, Final

import orjson

from contracts.errors import DecodeError, DecodeReason

MAX_RECORD_BYTES: Final = 1024 * 1024
"""A record value over 1 MiB is refused as ``too_large`` before it is parsed."""


def parse_json_object(data: bytes | bytearray | memoryview) -> dict[str, Any]:
    """Parse one JSON object; DecodeError ``too_large``, ``not_json`` or ``not_an_object``.

    The text must be UTF-8 (no byte order mark) and I-JSON: lone surrogates, ``NaN`` and
    trailing content are ``not_json``. Duplicate member names are not detected (the last one
    wins), so writers must never produce them.
    """
    if len(data) > MAX_RECORD_BYTES:
        raise DecodeError(
            DecodeReason.TOO_LARGE, f"{len(data)} bytes, the limit is {MAX_RECORD_BYTES}"
        )
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(DecodeReason.NOT_JSON, str(exc)) from None
    if type(value) is not dict:
        raise DecodeError(DecodeReason.NOT_AN_OBJECT, f"the top level is {_kind(value)}")
    return value


def _kind(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"
