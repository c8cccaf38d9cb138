"""Hostile records for the engine tests: what a producer can put on a topic that the engine must
survive — headers (null values, history that is null, nested past any parser, huge, not UTF-8,
non-ASCII, NUL), keys, sizes and bytes — and helpers to check that each ended applied,
deduplicated, stale or dead-lettered (on T.dlq or in core.dead_letters)."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg
from aiokafka import AIOKafkaProducer

from tests.events import encode
from tests.kafka_support import ReadRecord, cluster_event, read_all

HISTORY = "dlq.history"
MIB = 1024 * 1024


@dataclass(frozen=True)
class Hostile:
    """One record to publish and what it is."""

    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes | None], ...]
    valid: bool
    """An envelope that must be applied (whatever its headers and key)."""
    label: str


def header_sets(rng: random.Random) -> list[tuple[tuple[str, bytes | None], ...]]:
    """The header shapes that broke the engine or the dlq tools, plus random ones."""
    fixed: list[tuple[tuple[str, bytes | None], ...]] = [
        ((HISTORY, None),),
        ((HISTORY, b"null"),),
        ((HISTORY, b"[" * 50_000 + b"]" * 50_000),),
        ((HISTORY, b"[" * 300 + b"]" * 300),),
        ((HISTORY, ("é" * 200_000).encode()),),
        ((HISTORY, json.dumps([{"reason": "é" * 2000, "detail": "ü" * 5000}] * 50).encode()),),
        ((HISTORY, b"\xff\xfe\x00garbage"),),
        (("dlq.reason", b"evil\x00[/bold] [red]"), ("dlq.detail", b"\xff" * 50)),
        (("event_type", None), ("x", b"")),
        (("", b"\x00\x01"), ("\u00e9\u4e2d", "\u4e2d\u6587".encode())),
        (("[bold]markup[/]", b"[/unbalanced]"),),
    ]
    randoms = [
        tuple(
            (
                rng.choice(["dlq.history", "dlq.reason", "h", "event_type", "ñ"]),
                rng.choice([None, rng.randbytes(rng.randint(0, 64))]),
            )
            for _ in range(rng.randint(1, 4))
        )
        for _ in range(5)
    ]
    return fixed + randoms


def corpus(seed: int = 7, *, big: bool = True) -> list[Hostile]:
    """Valid envelopes and poison records under every header set, odd keys, and (``big``)
    records of ~1.5 MiB and mostly headers (the topics must allow 10 MiB)."""
    rng = random.Random(seed)
    out: list[Hostile] = []
    for index, hs in enumerate(header_sets(rng)):
        event = cluster_event()
        out.append(
            Hostile(
                str(event.payload.cluster_id).encode(),
                encode(event),
                hs,
                valid=True,
                label=f"h{index}",
            )
        )
        poison = rng.choice([b"{not json", b"\xff\xfe", b"[1]", b"", b"\x00" * 10])
        out.append(
            Hostile(rng.choice([None, b"", b"\xff"]), poison, hs, valid=False, label=f"p{index}")
        )
    # Keys: null, empty, not UTF-8, huge.
    for key in (None, b"", b"\xff\xfe\xfd", b"k" * 100_000):
        event = cluster_event()
        out.append(Hostile(key, encode(event), (), valid=True, label=f"key{len(key or b'')}"))
    if big:
        out.append(Hostile(b"big", b"x" * (3 * MIB // 2), (), valid=False, label="big-value"))
        headers = tuple((f"h{n}", rng.randbytes(100_000)) for n in range(15))
        out.append(Hostile(b"hdr", b"{not json", headers, valid=False, label="mostly-headers"))
        event = cluster_event()
        out.append(
            Hostile(
                b"ok-big-headers", encode(event), headers, valid=True, label="valid-big-headers"
            )
        )
    return out


async def publish_hostile(bootstrap: str, topic: str, records: Sequence[Hostile]) -> list[int]:
    """Publish in order (one partition); returns the offsets."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", max_request_size=12 * MIB)
    await producer.start()
    try:
        offsets = []
        for r in records:
            meta = await producer.send_and_wait(
                topic, value=r.value, key=r.key, headers=list(r.headers), partition=0
            )
            offsets.append(meta.offset)
        return offsets
    finally:
        await producer.stop()


@dataclass(frozen=True)
class Accounting:
    dead_on_topic: dict[int, ReadRecord]
    dead_in_table: dict[int, asyncpg.Record]


async def dead_letters_of(bootstrap: str, database_url: str, topic: str) -> Accounting:
    """Dead letters of ``topic`` by source offset: on T.dlq and in core.dead_letters."""
    on_topic = {
        int(r.header("dlq.source.offset") or -1): r
        for r in await read_all(bootstrap, f"{topic}.dlq", timeout=60)
    }
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch("SELECT * FROM core.dead_letters WHERE source_topic = $1", topic)
    finally:
        await conn.close()
    return Accounting(on_topic, {r["source_offset"]: r for r in rows})
