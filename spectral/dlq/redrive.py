"""Redrive: put dead letters back on their source topic, each at most once.

For each dead letter of ``T.dlq`` chosen by policy.py (matching ``--reason``, not redriven
before, carrying its original bytes, from ``T``): produce its original key and value to ``T``
with its original headers plus ``dlq.history`` (every failure so far) and ``dlq.redriven_from``
(spectral/kafka/dlq.py ``redrive_headers``). The consumer sees the same idempotency key: if the
event was applied meanwhile it is deduplicated; if it fails again the engine dead-letters it
again, its history carried over and grown by one.

Progress is the table ``core.dlq_redrives`` (migration 0007), one row per dead letter, written
one batch at a time as ``T.dlq`` is read (at most 500 dead letters or 16 MiB in memory at once,
however large the topic): BEGIN; insert the batch's rows (ON CONFLICT DO NOTHING: the ones
returned are ours — a concurrent redrive waits and then finds them taken); produce those records
and wait for the broker's acknowledgements; record where they landed; COMMIT. A failure before
the commit rolls the rows back, so those dead letters are redriven by the next run; if some of
them had been acknowledged already they reach the topic twice, and the consumer deduplicates
the second.
A per-record table rather than a committed consumer-group offset on ``T.dlq``: a run filtered
by ``--reason`` leaves other dead letters behind, which an offset would skip for good.

Whatever a dead letter holds, it cannot stop the others: its headers are read without raising
(spectral/kafka/dlq.py); a record the broker refuses (spectral/kafka/produce.py — e.g. the
original was at the source topic's size limit and the history pushes it over) is sent again
alone, then alone without its history; refused even so, its claim is released in the same
transaction (a later run, after the topic is fixed, tries it again) and it is reported as
skipped ``refused`` with the broker's reason.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from aiokafka.errors import KafkaError

from spectral.dlq.policy import L, Skipped, select
from spectral.dlq.records import DeadLetterRecord, Topics, scan_dead_letters, scan_summaries
from spectral.dlq.repository import RedriveRepository
from spectral.errors import TransientError
from spectral.kafka.configured import configured_transport
from spectral.kafka.dlq import redrive_headers
from spectral.kafka.produce import Message, Refused, Sender, Sent
from spectral.observability.logging import get_logger
from spectral.settings import Settings

log = get_logger(__name__)

REPORT_LIMIT = 1000

PATIENCE_MS = 120_000
"""How long a redriven record may wait for the cluster to take it (the producer's delivery
window): a partition below ``min.insync.replicas`` (a broker restarting) answers
``NotEnoughReplicas`` until its replicas are back, and an operator's redrive waits that out
rather than stopping after the shorter request timeout the long-running processes use."""
"""Dead letters a report lists one by one (it counts them all)."""


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


@dataclass(frozen=True, slots=True)
class Refusal:
    """A dead letter the broker would not take back on its source topic."""

    dlq_partition: int
    dlq_offset: int
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"dlq_partition": self.dlq_partition, "dlq_offset": self.dlq_offset, "why": self.why}


@dataclass(frozen=True)
class RedriveReport:
    topic: str
    dlq_topic: str
    dry_run: bool
    examined: int
    redriven: tuple[Redriven, ...]
    """The first :data:`REPORT_LIMIT` dead letters redriven (or that would be)."""
    skipped: dict[str, int] = field(default_factory=dict)
    refused: tuple[Refusal, ...] = ()
    count: int | None = None
    """How many were redriven (or would be), all of them (default: ``len(redriven)``)."""

    @property
    def total(self) -> int:
        return len(self.redriven) if self.count is None else self.count

    @property
    def truncated(self) -> bool:
        """``redriven`` lists only the first of them."""
        return self.total > len(self.redriven)

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "dlq_topic": self.dlq_topic,
            "dry_run": self.dry_run,
            "examined": self.examined,
            # A dry run redrives nothing: what it would redrive is named so.
            "redriven": 0 if self.dry_run else self.total,
            "would_redrive": self.total if self.dry_run else None,
            "skipped": self.skipped,
            "records": [r.to_json() for r in self.redriven],
            "records_truncated": self.truncated,
            "refused": [r.to_json() for r in self.refused],
        }


@dataclass
class _Progress:
    examined: int = 0
    count: int = 0
    listed: list[Redriven] = field(default_factory=list)
    skipped: Counter[Skipped] = field(default_factory=Counter)
    refusals: list[Refusal] = field(default_factory=list)

    def add(self, redriven: Sequence[Redriven]) -> None:
        self.count += len(redriven)
        self.listed.extend(redriven[: max(0, REPORT_LIMIT - len(self.listed))])

    def report(self, topics: Topics, *, dry_run: bool) -> RedriveReport:
        return RedriveReport(
            topics.source,
            topics.dlq,
            dry_run=dry_run,
            examined=self.examined,
            redriven=tuple(self.listed),
            skipped=_named(self.skipped),
            refused=tuple(self.refusals),
            count=self.count,
        )


async def redrive(
    settings: Settings,
    bootstrap: str,
    conn: asyncpg.Connection,
    *,
    topic: str,
    reason: str | None = None,
    dry_run: bool = False,
) -> RedriveReport:
    """Redrive the dead letters of ``topic`` (or of ``topic`` minus ``.dlq``), batch by batch:
    what is in memory at once is one batch (:func:`scan_dead_letters`), however large the
    dead-letter topic; the report lists the first :data:`REPORT_LIMIT` and counts them all."""
    topics = Topics.of(topic)
    progress = _Progress()
    run = _Pass(settings, bootstrap, RedriveRepository(conn), topics, reason, progress)
    producer = None
    if not dry_run:
        # the settings' transport (SPECTRAL_KAFKA_TRANSPORT), as the consumers' dead letters
        producer = configured_transport(settings, bootstrap).sender(
            [topics.source], delivery_timeout_ms=PATIENCE_MS
        )
    try:
        if producer is None:
            await run.plan()
        else:
            await producer.start()
            await run.send(producer)
    except (KafkaError, TransientError) as exc:
        raise TransientError(
            f"Kafka unavailable during redrive ({exc}); the dead letters not yet recorded as "
            "redriven will be redriven by the next run"
        ) from exc
    finally:
        if producer is not None:
            with contextlib.suppress(Exception):
                await producer.stop()
    report = progress.report(topics, dry_run=dry_run)
    if dry_run:
        return report
    log.info(
        "redrive",
        topic=topics.source,
        redriven=report.total,
        **{k.value: n for k, n in progress.skipped.items()},
    )
    for refusal in progress.refusals:
        log.warning(
            "dead letter not redriven: the broker refused it",
            dlq_partition=refusal.dlq_partition,
            dlq_offset=refusal.dlq_offset,
            why=refusal.why,
        )
    return report


@dataclass(frozen=True)
class _Pass:
    """One redrive's reading of ``T.dlq``, batch by batch."""

    settings: Settings
    bootstrap: str
    repository: RedriveRepository
    topics: Topics
    reason: str | None
    progress: _Progress

    async def _select(self, batch: Sequence[L]) -> list[L]:
        self.progress.examined += len(batch)
        done = await self.repository.redriven(self.topics.dlq, [r.position for r in batch])
        selection = select(
            batch, source_topic=self.topics.source, reason=self.reason, redriven=done
        )
        self.progress.skipped.update(selection.skipped)
        return selection.chosen

    async def plan(self) -> None:
        """A dry run: what would be redriven, from the records' summaries (no value kept)."""
        batches = scan_summaries(self.settings, self.bootstrap, self.topics.dlq)
        async with contextlib.aclosing(batches):
            async for summaries in batches:
                chosen = await self._select(summaries)
                self.progress.add(
                    [Redriven(s.partition, s.offset, s.reason, None, None) for s in chosen]
                )

    async def send(self, producer: Sender) -> None:
        """Redrive every dead letter chosen, one transaction per batch read."""
        progress = self.progress
        batches = scan_dead_letters(self.settings, self.bootstrap, self.topics.dlq)
        async with contextlib.aclosing(batches):
            async for records in batches:
                chosen = await self._select(records)
                if not chosen:
                    continue
                sent, raced, refused = await _batch(self.repository, producer, self.topics, chosen)
                progress.add(sent)
                progress.refusals.extend(refused[: max(0, REPORT_LIMIT - len(progress.refusals))])
                progress.skipped[Skipped.ALREADY_REDRIVEN] += raced
                progress.skipped[Skipped.REFUSED] += len(refused)


def _message(record: DeadLetterRecord, source: str, *, with_history: bool = True) -> Message:
    headers = redrive_headers(
        record.headers, record.topic, record.partition, record.offset, with_history=with_history
    )
    return Message(source, record.key, record.value, headers)


async def _send(
    producer: Sender, source: str, records: Sequence[DeadLetterRecord]
) -> list[Sent | Refused]:
    """Produce the redriven records; one the broker refuses is sent again alone, then alone
    without its history, before it counts as refused."""
    outcomes = await producer.send_each([_message(r, source) for r in records])
    for index, (record, outcome) in enumerate(zip(records, outcomes, strict=True)):
        if isinstance(outcome, Refused):
            alone = await producer.send_alone(_message(record, source))
            if isinstance(alone, Refused):
                alone = await producer.send_alone(_message(record, source, with_history=False))
            outcomes[index] = alone
    return outcomes


async def _batch(
    repository: RedriveRepository,
    producer: Sender,
    topics: Topics,
    batch: Sequence[DeadLetterRecord],
) -> tuple[list[Redriven], int, list[Refusal]]:
    """One transaction: claim, produce, await acks, record targets (and release the claims of
    refused records). Returns (done, raced, refused)."""
    async with repository.conn.transaction():
        ours = await repository.claim(topics.dlq, topics.source, batch)
        mine = [r for r in batch if r.position in ours]
        outcomes = await _send(producer, topics.source, mine)
        sent = [(r, o) for r, o in zip(mine, outcomes, strict=True) if isinstance(o, Sent)]
        refused = [
            Refusal(r.partition, r.offset, o.why)
            for r, o in zip(mine, outcomes, strict=True)
            if isinstance(o, Refused)
        ]
        await repository.record_targets(topics.dlq, [(r, o.partition, o.offset) for r, o in sent])
        if refused:
            await repository.release(topics.dlq, [(r.dlq_partition, r.dlq_offset) for r in refused])
    done = [Redriven(r.partition, r.offset, r.reason, o.partition, o.offset) for r, o in sent]
    return done, len(batch) - len(mine), refused


def _named(skipped: Counter[Skipped]) -> dict[str, int]:
    return {k.value: n for k, n in sorted(skipped.items()) if n}
