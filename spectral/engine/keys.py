"""The stored form of a dedup key (``core.event_handled.dedup_key``, migration
``compact_dedup_keys``).

What is deduplicated is the idempotency key exactly as the envelope carries it; only its stored
form is compact. A key spelled ``{uuid}:{32 hex digits}`` in lowercase (a failure-cluster
snapshot's ``cluster_id:snapshot_hash``) is stored as 33 bytes: a zero byte, the UUID's 16 bytes
and the hash's 16. Any other key is stored as its UTF-8 bytes, which never start with a zero
byte (a key holding U+0000 or a lone surrogate is refused: PostgreSQL's text cannot hold the
first, UTF-8 cannot spell the second, the contract's decoders refuse both before a key gets
here, and the engine never recorded one). So the stored form is one-to-one: two keys are stored
alike exactly when they are the same key, and :func:`key_text` gives the key back (the
database's ``core.dedup_key`` and ``core.dedup_key_text`` are the same two functions; operators
read the keys through the view ``core.event_handled_keys``).
"""

from __future__ import annotations

from binascii import unhexlify
from typing import Final
from uuid import UUID

_COMPACT_LENGTH: Final = 69
_TAG: Final = b"\x00"
_HEX_AS_ZERO: Final = bytes.maketrans(b"123456789abcdef", b"0" * 15)
"""Every lowercase hex digit as ``0``, every other byte as itself (``bytes.translate``)."""
_COMPACT_LAYOUT: Final = b"00000000-0000-0000-0000-000000000000:" + b"0" * 32
"""A key in the compact form with every hex digit read as ``0``."""


def _compact(key: str) -> bytes | None:
    """The compact form of ``key`` when it is spelled ``{uuid}:{32 hex digits}`` in lowercase
    (its bytes, every lowercase hex digit read as ``0``, are the layout: the separators where
    they belong and a lowercase hex digit everywhere else), else None."""
    if len(key) != _COMPACT_LENGTH or not key.isascii():
        return None
    spelled = key.encode()
    if spelled.translate(_HEX_AS_ZERO) != _COMPACT_LAYOUT:
        return None
    return _TAG + unhexlify(spelled.translate(None, b"-:"))


def dedup_key(key: str) -> bytes:
    """The stored form of the idempotency key ``key``."""
    compact = _compact(key)
    if compact is not None:
        return compact
    if "\x00" in key:
        msg = "an idempotency key holding U+0000 cannot be recorded"
        raise ValueError(msg)
    try:
        return key.encode()
    except UnicodeEncodeError:
        msg = "an idempotency key holding a lone surrogate cannot be recorded"
        raise ValueError(msg) from None


def dedup_keys(keys: list[str]) -> list[bytes]:
    """:func:`dedup_key` of each key (a batch's claim: every record's key). When every key is
    in the compact form — checked for all of them at once, as
    :func:`contracts.fields.are_wire_uuids` checks UUIDs: the keys joined by spaces, every
    lowercase hex digit read as ``0``, must be the compact layout repeated, joined by spaces
    (a key of another length, or with any other character, breaks it) — their digits are
    decoded in one call; otherwise each key is stored on its own."""
    count = len(keys)
    if count:
        joined = " ".join(keys).encode("utf-8", "surrogatepass")
        if joined.translate(_HEX_AS_ZERO) == b" ".join([_COMPACT_LAYOUT] * count):
            # each key's tag as two hex digits before its own: one decode gives the 33-byte
            # forms one after another
            forms = unhexlify(b"00" + joined.replace(b" ", b" 00").translate(None, b"-: "))
            return [forms[start : start + 33] for start in range(0, 33 * count, 33)]
    stored: list[bytes] = []
    for key in keys:
        if len(key) == _COMPACT_LENGTH and key.isascii():
            spelled = key.encode()
            if spelled.translate(_HEX_AS_ZERO) == _COMPACT_LAYOUT:
                stored.append(_TAG + unhexlify(spelled.translate(None, b"-:")))
                continue
        stored.append(dedup_key(key))
    return stored


def key_text(stored: bytes) -> str:
    """The idempotency key a stored dedup key stands for."""
    if len(stored) == 33 and stored[0] == 0:  # noqa: PLR2004 - the compact form's length
        return f"{UUID(bytes=stored[1:17])}:{stored[17:].hex()}"
    return stored.decode()
