"""RFC 8785 canonical JSON and the failure-cluster ``snapshot_hash``.

The canonical form (RFC 8785, "JCS") of the JSON values this project hashes:

* objects: members sorted by key, compared as sequences of UTF-16 code units; no whitespace;
* strings: UTF-8, every character unescaped except ``"`` -> ``\\"``, ``\\`` -> ``\\\\``,
  U+0008/0009/000A/000C/000D -> ``\\b \\t \\n \\f \\r`` and the other controls below U+0020
  -> ``\\u00xx`` (lowercase hex); DEL, U+2028/U+2029 and all non-ASCII are written as they are;
* numbers: integers only, in the I-JSON range -(2**53 - 1) .. 2**53 - 1, written in decimal;
  floats are refused (RFC 8785's ECMAScript number form is not needed and not offered);
* ``true``, ``false``, ``null``; arrays keep their order.

Strings with lone surrogates cannot be written as UTF-8 and are refused.

Bytes are produced by orjson (``OPT_SORT_KEYS``): its string escaping is byte-for-byte the
RFC 8785 escaping (tests compare every code point against the ``rfc8785`` package), and it is
an order of magnitude faster than ``json.dumps`` on the consumer hot path. Its key order is by
code point, which equals UTF-16 order except when one key has a character in U+E000..U+FFFF
where another has a character above U+FFFF at the same position; only then (the bytes hold both
a 3-byte sequence led by 0xEE/0xEF and a 4-byte sequence) the value is re-ordered explicitly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson
import xxhash

HASH_EXCLUDED_KEYS: Final = ("cluster_id", "snapshot_hash")
"""Payload keys left out of the snapshot hash (the identity, and the hash itself)."""

MAX_SAFE_INTEGER: Final = 2**53 - 1
"""Largest integer magnitude allowed in a hashed payload (I-JSON / RFC 8785)."""

MAX_NESTING_DEPTH: Final = 64
"""Most levels of nested objects/arrays in a hashed payload, the payload object being level 1."""

_SCALARS: Final = frozenset({str, int, bool, type(None)})
_CONTAINERS: Final = (dict, list, tuple)
_CONTAINER_TYPES: Final = frozenset(_CONTAINERS)
_OPTIONS: Final = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER
_BELOW_F0: Final = bytes(range(0xF0))


class CanonicalizationError(ValueError):
    """The value has no canonical form here (a float, a huge integer, a lone surrogate, ...)."""


def canonical_json(value: object) -> bytes:
    """The RFC 8785 canonical UTF-8 bytes of a JSON value built from dict/list/str/int/bool/None."""
    check_json_values(value)
    return canonical_json_prechecked(value)


def canonical_json_prechecked(value: object) -> bytes:
    """:func:`canonical_json` for a value the caller has already proven float-free.

    The decoder uses it after pydantic has validated every known field of a payload as a
    string, an integer or null and :func:`check_json_values` has vetted the unknown ones.
    Lone surrogates, integers beyond 2**53 - 1 and non-string keys are still refused.
    """
    try:
        out = orjson.dumps(value, option=_OPTIONS)
    except orjson.JSONEncodeError as exc:
        raise CanonicalizationError(_encode_failure(exc)) from exc
    if out.isascii() or not _needs_utf16_order(out):
        return out
    return orjson.dumps(_utf16_ordered(value), option=orjson.OPT_STRICT_INTEGER)


def check_json_values(value: object, path: str = "$", depth: int = 0) -> None:
    """Refuse anything that is not a JSON value of dict/list/tuple/str/int/bool/None.

    Floats (also NaN and infinities), other numbers, other objects and containers nested more
    than :data:`MAX_NESTING_DEPTH` levels deep raise :class:`CanonicalizationError` naming the
    first offending path (``$.a[2].b``). ``depth`` is how deep ``value`` itself sits in the
    hashed object (0 for the object itself).
    """
    if type(value) in _CONTAINERS:
        if not _is_json_container(value, depth + 1):
            raise CanonicalizationError(_first_bad_path(value, path, depth + 1))
    elif type(value) not in _SCALARS:
        raise CanonicalizationError(_describe_bad(value, path))


def snapshot_hash(payload: Mapping[str, Any]) -> str:
    """xxh3-128 (32 lowercase hex digits) of the canonical payload without the excluded keys.

    ``payload`` is the payload object as it is on the wire (parsed JSON), including any fields
    this version does not know.
    """
    body = _hashed_body(payload)
    check_json_values(body)
    return xxhash.xxh3_128_hexdigest(canonical_json_prechecked(body))


def snapshot_hash_prechecked(payload: Mapping[str, Any]) -> str:
    """:func:`snapshot_hash` for a payload the caller has already proven float-free (the
    decoder's hot path: :func:`canonical_json_prechecked` inlined, one frame instead of three).
    """
    body = dict(payload)
    body.pop("cluster_id", None)  # HASH_EXCLUDED_KEYS
    body.pop("snapshot_hash", None)
    try:
        out = orjson.dumps(body, option=_OPTIONS)
    except orjson.JSONEncodeError as exc:
        raise CanonicalizationError(_encode_failure(exc)) from exc
    if not out.isascii() and _needs_utf16_order(out):
        out = orjson.dumps(_utf16_ordered(body), option=orjson.OPT_STRICT_INTEGER)
    return xxhash.xxh3_128_hexdigest(out)


def _hashed_body(payload: Mapping[str, Any]) -> dict[str, Any]:
    body = dict(payload)
    for key in HASH_EXCLUDED_KEYS:
        body.pop(key, None)
    return body


def _is_json_container(value: Any, depth: int) -> bool:
    """Fast path: one set of value types per container, no paths."""
    if depth > MAX_NESTING_DEPTH:
        return False
    values = value.values() if type(value) is dict else value
    kinds = set(map(type, values))
    if kinds <= _SCALARS:
        return True
    if not kinds - _SCALARS <= _CONTAINER_TYPES:
        return False
    return all(_is_json_container(item, depth + 1) for item in values if type(item) in _CONTAINERS)


def _first_bad_path(value: Any, path: str, depth: int) -> str:
    """Slow path for the error message only: where the first non-JSON value sits."""
    if depth > MAX_NESTING_DEPTH:
        return f"{path}: nested more than {MAX_NESTING_DEPTH} levels deep"
    items: Any = value.items() if type(value) is dict else enumerate(value)
    for key, item in items:
        sub = f"{path}.{key}" if type(value) is dict else f"{path}[{key}]"
        if type(item) in _CONTAINERS:
            if not _is_json_container(item, depth + 1):
                return _first_bad_path(item, sub, depth + 1)
        elif type(item) not in _SCALARS:
            return _describe_bad(item, sub)
    return f"{path}: not a JSON value"  # pragma: no cover - only called when something is bad


def _describe_bad(value: object, path: str) -> str:
    if isinstance(value, float):
        return f"{path}: numbers in hashed payloads must be integers, found {value!r}"
    return f"{path}: {type(value).__name__} is not a JSON value"


def _encode_failure(exc: orjson.JSONEncodeError) -> str:
    text = str(exc)
    if "53-bit" in text or "64-bit" in text:
        return f"integers must lie within +/-{MAX_SAFE_INTEGER} ({text})"
    if "surrogates" in text:
        return f"strings must not contain lone surrogates ({text})"
    return text


def _needs_utf16_order(out: bytes) -> bool:
    """Whether code-point key order could differ from UTF-16 order somewhere in ``out``."""
    has_private_bmp = b"\xee" in out or b"\xef" in out  # lead bytes of U+E000..U+FFFF
    return has_private_bmp and bool(out.translate(None, _BELOW_F0))  # lead bytes of astral


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _utf16_ordered(value: Any) -> Any:
    """A copy of ``value`` whose objects iterate in UTF-16 key order (orjson keeps that order)."""
    if type(value) is dict:
        return {key: _utf16_ordered(value[key]) for key in sorted(value, key=_utf16_key)}
    if type(value) in (list, tuple):
        return [_utf16_ordered(item) for item in value]
    return value
