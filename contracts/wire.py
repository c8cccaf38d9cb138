"""The first steps of reading a record: size limit, one JSON parse, an object at the top; and
the whole-record rule that no string holds U+0000."""

from __future__ import annotations

from typing import Any, Final

import orjson

from contracts.errors import DecodeError, DecodeReason

MAX_RECORD_BYTES: Final = 1024 * 1024
"""A record value over 1 MiB is refused as ``too_large`` before it is parsed."""

MAX_PRODUCE_BYTES: Final = MAX_RECORD_BYTES + 64 * 1024
"""The topics' ``max.message.bytes``, and the request (or batch) size limit every producer sets:
a record whose value is :data:`MAX_RECORD_BYTES` long, with its key, headers and the batch's
framing, fits (1,114,112 bytes; Kafka clients default to 1,048,576 or less, which refuse it)."""

NUL_ESCAPE: Final = b"\\u0000"
"""How U+0000 appears in JSON text (a raw NUL byte is not JSON: control characters in strings
must be escaped), so text without these six bytes holds no U+0000."""


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


def find_nul(data: bytes | bytearray | memoryview, value: object) -> str | None:
    """Where the first string (value or member name) holding U+0000 sits in ``value``, the
    parsed form of ``data``, as a path (``$.payload.evidence_bundle[0].summary``); None when
    there is none. Only text with the escape is walked (the walk is iterative: any depth); text
    without a backslash, most records, is ruled out by one ``memchr`` (a sixth of the cost of
    searching for the escape itself).
    """
    if type(data) is bytes and data.find(b"\\") < 0:  # no escape at all (memchr): most records
        return None
    if NUL_ESCAPE not in data:
        return None
    stack: list[tuple[str, object]] = [("$", value)]
    while stack:
        path, node = stack.pop()
        if type(node) is str:
            if "\x00" in node:
                return path
        elif type(node) is dict:
            for key, item in reversed(node.items()):
                if "\x00" in key:
                    return f"{path} (a member name)"
                stack.append((f"{path}.{key}", item))
        elif type(node) is list:
            stack.extend(
                (f"{path}[{index}]", item) for index, item in reversed(list(enumerate(node)))
            )
    return None
