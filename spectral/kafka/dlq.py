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
  dlq.history           JSON list of earlier failures of the same record ({reason, detail,
                        consumer, failed_at, source}), oldest first — grows on every redrive

Original headers (event_type, idempotency_key) are carried over unchanged.

Redrive (``spectral dlq redrive``) puts a dead letter's original key and value back on its source
topic with its non-``dlq.*`` headers plus:

  dlq.history           every failure so far (the dead letter's history and its own failure)
  dlq.redriven_from     where the dead letter was: ``T.dlq:partition:offset``

A redriven record that fails again is dead-lettered with that history carried over (the
``history`` of a :class:`DeadLetter` defaults to the ``dlq.history`` of the record it is about).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

PREFIX = "dlq."
HISTORY = "dlq.history"
REDRIVEN_FROM = "dlq.redriven_from"
DETAIL_LIMIT = 1000
MAX_REQUEST_BYTES = 16 * 1024 * 1024
"""Request limit of a producer of dead letters or redriven records: they carry the original
bytes, which may exceed the contract's 1 MiB limit (that may be why they are dead)."""


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
    original_headers: tuple[tuple[str, bytes], ...] = ()
    failed_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    history: tuple[dict[str, Any], ...] = ()

    def __post_init__(self) -> None:
        # A redriven record that failed again: its dead letter continues the record's history.
        if not self.history:
            carried = carried_history(self.original_headers)
            if carried:
                object.__setattr__(self, "history", carried)

    def headers(self) -> list[tuple[str, bytes]]:
        own = [
            ("dlq.reason", self.reason),
            ("dlq.detail", self.detail[:DETAIL_LIMIT]),
            ("dlq.source.topic", self.source_topic),
            ("dlq.source.partition", str(self.source_partition)),
            ("dlq.source.offset", str(self.source_offset)),
            ("dlq.consumer", self.consumer),
            ("dlq.failed_at", self.failed_at.isoformat().replace("+00:00", "Z")),
            (HISTORY, json.dumps(list(self.history), separators=(",", ":"))),
        ]
        carried = [(k, v) for k, v in self.original_headers if not k.startswith(PREFIX)]
        return carried + [(k, v.encode()) for k, v in own]

    def as_reference(self, why: str) -> DeadLetter:
        """This dead letter without its value, for bytes no producer can send: the headers
        keep the reason, the original size and digest, and where the original still is."""
        digest = hashlib.sha256(self.value).hexdigest()
        return replace(
            self,
            value=b"",
            detail=f"{self.detail} [original value of {len(self.value)} bytes (sha256 {digest}) "
            f"left at its source offset: {why}]",
        )

    def as_history_item(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "detail": self.detail[:DETAIL_LIMIT],
            "consumer": self.consumer,
            "failed_at": self.failed_at.isoformat().replace("+00:00", "Z"),
            "source": f"{self.source_topic}:{self.source_partition}:{self.source_offset}",
        }


def parse_headers(headers: Sequence[tuple[str, bytes]]) -> dict[str, str]:
    """The dlq.* headers of a dead-letter record, decoded."""
    return {k: v.decode("utf-8", "replace") for k, v in headers if k.startswith(PREFIX)}


def history_of(headers: Sequence[tuple[str, bytes]]) -> list[dict[str, Any]]:
    """Earlier failures recorded on a dead-letter record plus the failure it records itself."""
    parsed = parse_headers(headers)
    try:
        earlier = json.loads(parsed.get("dlq.history", "[]"))
    except ValueError:
        earlier = []
    if not isinstance(earlier, list):
        earlier = []
    if "dlq.reason" in parsed:
        earlier.append(
            {
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
        )
    return earlier


def carried_history(headers: Sequence[tuple[str, bytes]]) -> tuple[dict[str, Any], ...]:
    """The ``dlq.history`` a record carries (a redriven record), oldest first; () otherwise."""
    for key, value in headers:
        if key == HISTORY:
            try:
                items = json.loads(value)
            except ValueError:
                return ()
            if isinstance(items, list):
                return tuple(item for item in items if isinstance(item, dict))
            return ()
    return ()


def redrive_headers(
    headers: Sequence[tuple[str, bytes]], dlq_topic: str, partition: int, offset: int
) -> list[tuple[str, bytes]]:
    """Headers of the record that redrives the dead letter at ``dlq_topic:partition:offset``:
    the original headers, the full failure history and where the dead letter was."""
    carried = [(k, v) for k, v in headers if not k.startswith(PREFIX)]
    history = json.dumps(history_of(headers), separators=(",", ":"))
    return [
        *carried,
        (HISTORY, history.encode()),
        (REDRIVEN_FROM, f"{dlq_topic}:{partition}:{offset}".encode()),
    ]
