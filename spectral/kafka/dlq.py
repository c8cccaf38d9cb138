"""Dead letters: the wire form of a record that could not be applied.

A dead letter of topic T is produced to ``T.dlq`` with the ORIGINAL key and value bytes, and
headers saying why and where from:

  dlq.reason            machine-readable reason (a decode reason, ``handler_error``, ...)
  dlq.detail            human-readable detail (at most 1,000 characters)
  dlq.source.topic      the topic it was consumed from
  dlq.source.partition  partition (decimal)
  dlq.source.offset     offset (decimal)
  dlq.consumer          the consumer deployment's name
  dlq.failed_at         RFC 3339 UTC time of the failure
  dlq.history           JSON list (UTF-8) of earlier failures of the same record ({reason, detail,
                        consumer, failed_at, source}), oldest first — grows on every redrive

Original headers (event_type, idempotency_key) are carried over unchanged.

Redrive (``spectral dlq redrive``) puts a dead letter's original key and value back on its source
topic with its non-``dlq.*`` headers plus:

  dlq.history           every failure so far (the dead letter's history and its own failure)
  dlq.redriven_from     where the dead letter was: ``T.dlq:partition:offset``

A redriven record that fails again is dead-lettered with that history carried over (the
``history`` of a :class:`DeadLetter` defaults to the ``dlq.history`` of the record it is about).

Header content is untrusted (any producer can write any header): every function here is total
over it — a value that is null, not UTF-8, not JSON, nested deeper than any parser allows, or
megabytes long is read as "no history" or cut, never raised on. What is written back is bounded:
at most :data:`HISTORY_ITEMS` history items of bounded fields, so a record failing again and
again cannot grow its dead letter without limit.

When the full dead letter cannot be produced (too large for the dead-letter topic, or the
broker refuses it for another permanent reason), :meth:`DeadLetter.as_reference` is a small one:
no value, no original headers, a key only if it is short — their sizes and digests in the
detail, the original left at its source offset.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol

import orjson

PREFIX = "dlq."
HISTORY = "dlq.history"
REDRIVEN_FROM = "dlq.redriven_from"
DETAIL_LIMIT = 1000
FIELD_LIMIT = 300
"""Characters kept of a history item's short fields (reason, consumer, failed_at, source)."""
HISTORY_ITEMS = 20
"""History items carried at most: the first failure and the latest ones."""
HISTORY_READ_LIMIT = 256 * 1024
"""A ``dlq.history`` header longer than this (bytes) is not parsed."""
REFERENCE_KEY_LIMIT = 1024
"""A reference dead letter keeps the record's key only up to this many bytes."""
MAX_REQUEST_BYTES = 16 * 1024 * 1024
"""Request limit of a producer of dead letters or redriven records: they carry the original
bytes, which may exceed the contract's 1 MiB limit (that may be why they are dead)."""
_HISTORY_FIELDS = ("reason", "detail", "consumer", "failed_at", "source")

Headers = Sequence[tuple[str, bytes | None]]
"""Kafka record headers as aiokafka gives them: a header value may be null."""


class RecordLike(Protocol):
    """What a dead letter is made from: a fetched Kafka record or a decoded delivery."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Headers: ...


def text(value: bytes | None) -> str:
    """A header value as text, whatever its bytes (null: empty)."""
    return "" if value is None else value.decode("utf-8", "replace")


def utf8(value: str) -> bytes:
    """``value`` as UTF-8, whatever it holds (lone surrogates replaced)."""
    return value.encode("utf-8", "replace")


def _stamp(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class DeadLetter:
    reason: str
    detail: str
    source_topic: str
    source_partition: int
    source_offset: int
    consumer: str
    key: bytes | None
    value: bytes
    original_headers: tuple[tuple[str, bytes | None], ...] = ()
    failed_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    history: tuple[dict[str, str], ...] = ()

    def __post_init__(self) -> None:
        # A redriven record that failed again: its dead letter continues the record's history.
        if not self.history:
            carried = carried_history(self.original_headers)
            if carried:
                object.__setattr__(self, "history", carried)

    @classmethod
    def of(cls, record: RecordLike, *, consumer: str, reason: str, detail: str) -> DeadLetter:
        """The dead letter of ``record`` (a fetched record or a delivery): its original key,
        value and headers, where it came from and why it failed."""
        return cls(
            reason=reason,
            detail=detail,
            source_topic=record.topic,
            source_partition=record.partition,
            source_offset=record.offset,
            consumer=consumer,
            key=record.key,
            value=record.value if record.value is not None else b"",
            original_headers=tuple(record.headers or ()),
        )

    @property
    def source(self) -> str:
        return f"{self.source_topic}:{self.source_partition}:{self.source_offset}"

    def headers(self) -> list[tuple[str, bytes | None]]:
        own = [
            ("dlq.reason", utf8(self.reason[:FIELD_LIMIT])),
            ("dlq.detail", utf8(self.detail[:DETAIL_LIMIT])),
            ("dlq.source.topic", utf8(self.source_topic)),
            ("dlq.source.partition", str(self.source_partition).encode()),
            ("dlq.source.offset", str(self.source_offset).encode()),
            ("dlq.consumer", utf8(self.consumer[:FIELD_LIMIT])),
            ("dlq.failed_at", _stamp(self.failed_at).encode()),
            (HISTORY, orjson.dumps(list(self.history))),
        ]
        carried = [(k, v) for k, v in self.original_headers if not k.startswith(PREFIX)]
        return [*carried, *own]

    def size(self) -> int:
        """Bytes of key, value and headers (what the broker's record limit is measured on,
        less a few dozen bytes of framing)."""
        headers = sum(len(utf8(k)) + len(v or b"") for k, v in self.headers())
        return len(self.key or b"") + len(self.value) + headers

    def as_reference(self, why: str) -> DeadLetter:
        """This dead letter small enough for any dead-letter topic: no value, no original
        headers and no key over :data:`REFERENCE_KEY_LIMIT` bytes; the detail keeps their sizes
        and digests and says where the original still is."""
        key = self.key if self.key is None or len(self.key) <= REFERENCE_KEY_LIMIT else None
        dropped = [f"value of {len(self.value)} bytes (sha256 {_digest(self.value)})"]
        if key is None and self.key is not None:
            dropped.append(f"key of {len(self.key)} bytes (sha256 {_digest(self.key)})")
        header_bytes = sum(len(k) + len(v or b"") for k, v in self.original_headers)
        if self.original_headers:
            dropped.append(f"{len(self.original_headers)} headers of {header_bytes} bytes")
        note = f"[{', '.join(dropped)} {REFERENCE_MARK}: {why}]"
        return replace(
            self,
            value=b"",
            key=key,
            original_headers=(),
            detail=f"{note} {self.detail}"[:DETAIL_LIMIT],
        )

    def as_history_item(self) -> dict[str, str]:
        return {
            "reason": self.reason[:FIELD_LIMIT],
            "detail": self.detail[:DETAIL_LIMIT],
            "consumer": self.consumer[:FIELD_LIMIT],
            "failed_at": _stamp(self.failed_at),
            "source": self.source[:FIELD_LIMIT],
        }


REFERENCE_MARK = "left at its source offset"
"""In the detail of a reference dead letter (:meth:`DeadLetter.as_reference`)."""


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def parse_headers(headers: Headers) -> dict[str, str]:
    """The dlq.* headers of a dead-letter record, decoded (the first of each name wins)."""
    out: dict[str, str] = {}
    for k, v in headers:
        if k.startswith(PREFIX) and k not in out:
            out[k] = text(v)
    return out


def _item(raw: Any) -> dict[str, str] | None:
    """A history item as it may be carried on: known fields, as bounded text."""
    if not isinstance(raw, dict):
        return None
    item: dict[str, str] = {}
    for name in _HISTORY_FIELDS:
        value = raw.get(name)
        if value is None:
            continue
        if isinstance(value, str):
            shown = value
        else:
            try:
                shown = orjson.dumps(value).decode()
            except orjson.JSONEncodeError:  # nested deeper than the encoder goes
                shown = f"<{type(value).__name__}>"
        item[name] = shown[: DETAIL_LIMIT if name == "detail" else FIELD_LIMIT]
    return item


def _bounded(items: list[dict[str, str]]) -> list[dict[str, str]]:
    """At most HISTORY_ITEMS: the first failure, a note of how many were left out, the latest."""
    if len(items) <= HISTORY_ITEMS:
        return items
    latest = items[-(HISTORY_ITEMS - 2) :]
    left_out = len(items) - len(latest) - 1
    note = {"reason": "history_cut", "detail": f"{left_out} earlier failures left out"}
    return [items[0], note, *latest]


def _parse_history(value: bytes | None) -> list[dict[str, str]]:
    """The items of a ``dlq.history`` header value; [] for anything that is not a readable
    list (null, not UTF-8, not JSON, nested too deep, over HISTORY_READ_LIMIT bytes)."""
    if value is None or len(value) > HISTORY_READ_LIMIT:
        return []
    try:
        items = orjson.loads(value)
    except (orjson.JSONDecodeError, RecursionError, MemoryError):
        return []
    if not isinstance(items, list):
        return []
    return [item for item in map(_item, items) if item is not None]


def _first(headers: Headers, name: str) -> tuple[bool, bytes | None]:
    for key, value in headers:
        if key == name:
            return True, value
    return False, None


def history_of(headers: Headers) -> list[dict[str, str]]:
    """Earlier failures recorded on a dead-letter record plus the failure it records itself."""
    parsed = parse_headers(headers)
    earlier = _parse_history(_first(headers, HISTORY)[1])
    if "dlq.reason" in parsed:
        own = {
            "reason": parsed["dlq.reason"],
            "detail": parsed.get("dlq.detail", ""),
            "consumer": parsed.get("dlq.consumer", ""),
            "failed_at": parsed.get("dlq.failed_at", ""),
            "source": "{}:{}:{}".format(
                parsed.get("dlq.source.topic", ""),
                parsed.get("dlq.source.partition", ""),
                parsed.get("dlq.source.offset", ""),
            ),
        }
        bounded = _item(own)
        if bounded is not None:
            earlier.append(bounded)
    return earlier


def carried_history(headers: Headers) -> tuple[dict[str, str], ...]:
    """The ``dlq.history`` a record carries (a redriven record), oldest first, bounded;
    () when it carries none or none that can be read."""
    found, value = _first(headers, HISTORY)
    if not found:
        return ()
    return tuple(_bounded(_parse_history(value)))


def redrive_headers(
    headers: Headers, dlq_topic: str, partition: int, offset: int, *, with_history: bool = True
) -> list[tuple[str, bytes | None]]:
    """Headers of the record that redrives the dead letter at ``dlq_topic:partition:offset``:
    the original headers, the failure history (bounded; none with ``with_history=False``) and
    where the dead letter was."""
    carried = [(k, v) for k, v in headers if not k.startswith(PREFIX)]
    history = _bounded(history_of(headers)) if with_history else []
    return [
        *carried,
        (HISTORY, orjson.dumps(history)),
        (REDRIVEN_FROM, utf8(f"{dlq_topic}:{partition}:{offset}")),
    ]
