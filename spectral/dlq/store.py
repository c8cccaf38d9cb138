"""The dead-letter table ``core.dead_letters``: where a dead letter goes when the broker refuses
even its reference form (see spectral/engine/dead_letters.py), and where ``spectral dlq
list/show`` find it.

Everything a record may hold is stored losslessly or cut with its size and digest kept: the key
and the value as bytes (the value up to :data:`VALUE_LIMIT`), header values base64 in JSON (a
header may hold any bytes), text columns with what PostgreSQL's text cannot hold (NUL, lone
surrogates) replaced by U+FFFD.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import asyncpg
import orjson

from spectral.db.connect import guarded
from spectral.db.queries import load_queries
from spectral.kafka.dlq import DeadLetter

_SQL: Final = load_queries(Path(__file__).with_name("store.sql"))
VALUE_LIMIT: Final = 16 * 1024 * 1024
"""Bytes of a record's value kept in the table (its size and sha256 are always kept)."""
HEADERS_LIMIT: Final = 1024 * 1024
"""Bytes of header values kept; the headers past it are listed without their values."""
KEY_LIMIT: Final = 1024 * 1024


def storable(value: str) -> str:
    """``value`` as PostgreSQL text and jsonb can hold it: NUL and lone surrogates replaced."""
    cleaned = value.encode("utf-8", "replace").decode("utf-8")
    return cleaned.replace("\x00", "\ufffd")


def _headers_json(headers: Sequence[tuple[str, bytes | None]]) -> str:
    kept: list[list[str | None]] = []
    room = HEADERS_LIMIT
    for name, value in headers:
        if value is not None and len(value) > room:
            kept.append([storable(name), None, f"{len(value)} bytes not kept"])
            continue
        room -= len(value or b"")
        kept.append([storable(name), None if value is None else base64.b64encode(value).decode()])
    return orjson.dumps(kept).decode()


def _history_json(history: Sequence[dict[str, str]]) -> str:
    return orjson.dumps(
        [{storable(k): storable(v) for k, v in item.items()} for item in history]
    ).decode()


@dataclass(frozen=True, slots=True)
class Refused:
    """A dead letter the broker would not take, and its refusal."""

    letter: DeadLetter
    refusal: str


async def record(conn: asyncpg.Connection, refused: Sequence[Refused]) -> None:
    """Insert the rows of ``refused`` (a row recorded before is kept as it was)."""
    letters = [r.letter for r in refused]
    await guarded(
        "record dead letters in core.dead_letters",
        lambda: conn.execute(
            _SQL["record_dead_letters"],
            [storable(d.consumer) for d in letters],
            [storable(d.source_topic) for d in letters],
            [d.source_partition for d in letters],
            [d.source_offset for d in letters],
            [storable(d.reason) for d in letters],
            [storable(d.detail) for d in letters],
            [storable(r.refusal) for r in refused],
            [d.failed_at for d in letters],
            [None if d.key is None else d.key[:KEY_LIMIT] for d in letters],
            [len(d.key or b"") for d in letters],
            [d.value[:VALUE_LIMIT] for d in letters],
            [len(d.value) for d in letters],
            [hashlib.sha256(d.value).hexdigest() for d in letters],
            [_headers_json(d.original_headers) for d in letters],
            [len(d.original_headers) for d in letters],
            [_history_json(d.history) for d in letters],
        ),
    )


@dataclass(frozen=True)
class StoredDeadLetter:
    """A row of ``core.dead_letters``."""

    id: int
    consumer: str
    source_topic: str
    source_partition: int
    source_offset: int
    reason: str
    detail: str
    refusal: str
    failed_at: datetime
    key: bytes | None
    key_size: int
    value_head: bytes
    value_size: int
    value_sha256: str
    headers: tuple[tuple[str, bytes | None], ...]
    header_count: int
    history: tuple[dict[str, str], ...]
    recorded_at: datetime

    @property
    def source(self) -> str:
        return f"{self.source_topic}:{self.source_partition}:{self.source_offset}"

    @property
    def complete(self) -> bool:
        """The whole value is in the row."""
        return len(self.value_head) == self.value_size


def _decode_headers(raw: str) -> tuple[tuple[str, bytes | None], ...]:
    out: list[tuple[str, bytes | None]] = []
    for entry in orjson.loads(raw):
        name, value = str(entry[0]), entry[1]
        out.append((name, None if value is None else base64.b64decode(value)))
    return tuple(out)


def _row(row: Any) -> StoredDeadLetter:
    return StoredDeadLetter(
        id=row["id"],
        consumer=row["consumer"],
        source_topic=row["source_topic"],
        source_partition=row["source_partition"],
        source_offset=row["source_offset"],
        reason=row["reason"],
        detail=row["detail"],
        refusal=row["refusal"],
        failed_at=row["failed_at"],
        key=row["record_key"],
        key_size=row["key_size"],
        value_head=row["value_head"],
        value_size=row["value_size"],
        value_sha256=row["value_sha256"],
        headers=_decode_headers(row["headers"]),
        header_count=row["header_count"],
        history=tuple(orjson.loads(row["history"])),
        recorded_at=row["recorded_at"],
    )


async def stored(
    conn: asyncpg.Connection, source_topic: str, *, reason: str | None, limit: int
) -> list[StoredDeadLetter]:
    """The oldest ``limit`` rows of ``source_topic`` (of ``reason``), for a listing: without
    their value and headers, with the first KiB of their key."""
    rows = await guarded(
        "read core.dead_letters",
        lambda: conn.fetch(_SQL["dead_letter_summaries_of_topic"], source_topic, reason, limit),
    )
    return [_row(r) for r in rows]


async def stored_one(
    conn: asyncpg.Connection, source_topic: str, row_id: int
) -> StoredDeadLetter | None:
    """Row ``row_id`` of ``source_topic``, whole (None: there is none)."""
    row = await guarded(
        "read core.dead_letters",
        lambda: conn.fetchrow(_SQL["dead_letter_of_topic"], source_topic, row_id),
    )
    return None if row is None else _row(row)
