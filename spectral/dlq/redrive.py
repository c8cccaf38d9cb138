"""Redrive: put dead letters back on their source topic, each at most once.

For each dead letter of ``T.dlq`` chosen by policy.py (matching ``--reason``, not redriven
before, carrying its original bytes, from ``T``): produce its original key and value to ``T``
with its original headers plus ``dlq.history`` (every failure so far) and ``dlq.redriven_from``
(spectral/kafka/dlq.py ``redrive_headers``). The consumer sees the same idempotency key: if the
event was applied meanwhile it is deduplicated; if it fails again the engine dead-letters it
again, its history carried over and grown by one.

Progress is the table ``core.dlq_redrives`` (migration 0007), one row per dead letter, written in
batches: BEGIN; insert the batch's rows (ON CONFLICT DO NOTHING: the ones returned are ours —
a concurrent redrive waits and then finds them taken); produce those records and wait for the
broker's acknowledgements; record where they landed; COMMIT. A failure before the commit
rolls the rows back, so those dead letters are redriven by the next run; if some of them had
been acknowledged already they reach the topic twice, and the consumer deduplicates the second.
A per-record table rather than a committed consumer-group offset on ``T.dlq``: a run filtered
by ``--reason`` leaves other dead letters behind, which an offset would skip for good.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from spectral.dlq.policy import Skipped, select
from spectral.dlq.records import DeadLetterRecord, Topics, read_dead_letters
from spectral.dlq.repository import RedriveRepository
from spectral.errors import TransientError
from spectral.kafka.config import producer_kwargs
from spectral.kafka.dlq import MAX_REQUEST_BYTES, redrive_headers
from spectral.observability.logging import get_logger
from spectral.settings import Settings

log = get_logger(__name__)

BATCH = 500


@dataclass(frozen=True, slots=True)
class Redriven:
    dlq_partition: int
    dlq_offset: int
    reason: str
    partition: int | None
    """Where the record landed on the source topic (None in a dry run)."""
    offset: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "dlq_partition": self.dlq_partition,
            "dlq_offset": self.dlq_offset,
            "reason": self.reason,
            "partition": self.partition,
            "offset": self.offset,
        }


@dataclass(frozen=True)
class RedriveReport:
    topic: str
    dlq_topic: str
    dry_run: bool
    examined: int
    redriven: tuple[Redriven, ...]
    skipped: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "dlq_topic": self.dlq_topic,
            "dry_run": self.dry_run,
            "examined": self.examined,
            "redriven": len(self.redriven),
            "skipped": self.skipped,
            "records": [r.to_json() for r in self.redriven],
        }


async def redrive(
    settings: Settings,
    bootstrap: str,
    conn: asyncpg.Connection,
    *,
    topic: str,
    reason: str | None = None,
    dry_run: bool = False,
) -> RedriveReport:
    """Redrive the dead letters of ``topic`` (or of ``topic`` minus ``.dlq``)."""
    topics = Topics.of(topic)
    repository = RedriveRepository(conn)
    records = await read_dead_letters(settings, bootstrap, topics.dlq)
    selection = select(
        records,
        source_topic=topics.source,
        reason=reason,
        redriven=await repository.redriven(topics.dlq),
    )
    if dry_run:
        planned = tuple(
            Redriven(r.partition, r.offset, r.reason, None, None) for r in selection.chosen
        )
        return RedriveReport(
            topics.source,
            topics.dlq,
            dry_run=True,
            examined=len(records),
            redriven=planned,
            skipped=_named(selection.skipped),
        )
    producer = AIOKafkaProducer(
        **producer_kwargs(settings, bootstrap),
        max_request_size=MAX_REQUEST_BYTES,
    )
    landed: list[Redriven] = []
    skipped = selection.skipped
    try:
        await producer.start()
        for start in range(0, len(selection.chosen), BATCH):
            batch = selection.chosen[start : start + BATCH]
            done, raced = await _batch(repository, producer, topics, batch)
            landed.extend(done)
            skipped[Skipped.ALREADY_REDRIVEN] += raced
    except KafkaError as exc:
        raise TransientError(
            f"Kafka unavailable during redrive ({exc}); the dead letters not yet recorded as "
            "redriven will be redriven by the next run"
        ) from exc
    finally:
        with contextlib.suppress(Exception):
            await producer.stop()
    log.info(
        "redrive",
        topic=topics.source,
        redriven=len(landed),
        **{k.value: n for k, n in skipped.items()},
    )
    return RedriveReport(
        topics.source,
        topics.dlq,
        dry_run=False,
        examined=len(records),
        redriven=tuple(landed),
        skipped=_named(skipped),
    )


async def _batch(
    repository: RedriveRepository,
    producer: AIOKafkaProducer,
    topics: Topics,
    batch: Sequence[DeadLetterRecord],
) -> tuple[list[Redriven], int]:
    """One transaction: claim, produce, await acks, record targets. Returns (done, raced)."""
    async with repository.conn.transaction():
        ours = await repository.claim(topics.dlq, topics.source, batch)
        mine = [r for r in batch if r.position in ours]
        futures = [
            await producer.send(
                topics.source,
                value=r.value,
                key=r.key,
                headers=redrive_headers(r.headers, r.topic, r.partition, r.offset),
            )
            for r in mine
        ]
        metadata = await asyncio.gather(*futures)
        await repository.record_targets(
            topics.dlq, [(r, m.partition, m.offset) for r, m in zip(mine, metadata, strict=True)]
        )
    done = [
        Redriven(r.partition, r.offset, r.reason, m.partition, m.offset)
        for r, m in zip(mine, metadata, strict=True)
    ]
    return done, len(batch) - len(mine)


def _named(skipped: Counter[Skipped]) -> dict[str, int]:
    return {k.value: n for k, n in sorted(skipped.items()) if n}
