"""The FastStream peer of ``make bench``: the rule-candidates projection written as a FastStream
user would write it, following FastStream's documentation.

A batch subscriber (``batch=True``) in a consumer group decodes each batch into a pydantic model
of the event (FastStream's own JSON decoding and validation), then, in one asyncpg transaction
acting as ``spectral_projector``: records the batch's keys in ``core.event_handled`` (the engine's
own ``claim_keys`` statement), keeps each cluster's newest snapshot (the projection's order: last
observation capped at the record's timestamp plus five minutes, then failures, then hash), upserts
them with the projection's own ``upsert_snapshots`` statement (older snapshots never win, operator
columns never named) and marks the snapshots it did not write stale. ``AckPolicy.NACK_ON_ERROR``
commits the batch's offsets after the handler returned and rewinds on an exception.

The same dedup, ordering and table as spectral; what it leaves out (the contract's full check:
snapshot hash, canonical spellings, record key; dead letters: a record it cannot decode or apply
fails its batch again and again; pipelining) is what the comparison prices. Run by the benchmark
as ``python -m benchmarks.peers.faststream_peer``; it stops after ``--records`` records and prints
one JSON line: records, the window (first receive to last commit) and the process's CPU in it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import asyncpg
from faststream import FastStream
from faststream.kafka import KafkaBroker
from faststream.kafka.annotations import KafkaMessage
from faststream.middlewares import AckPolicy, BaseMiddleware
from pydantic import BaseModel

from benchmarks.statements import ENGINE_SQL, PROJECTION_SQL
from contracts.fields import epoch_micros
from spectral.engine.keys import dedup_keys, key_text

CONSUMER = "rule-candidates"
ROLE = "spectral_projector"
MAX_RECORDS = 2000
SKEW = timedelta(minutes=5)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Snapshot(BaseModel):
    cluster_id: UUID
    snapshot_hash: str
    rule_id: UUID
    workspace_id: UUID
    severity: str
    failure_count: int
    first_observed_at: datetime
    last_observed_at: datetime
    evidence_bundle: list[dict[str, Any]]
    suggested_rule_stub: str | None = None


class ClusterEvent(BaseModel):
    event_id: UUID
    event_type: str
    idempotency_key: str
    occurred_at: datetime
    payload: Snapshot


class Window:
    """First receive to the end of the last batch, and the process's CPU at both ends."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.done = asyncio.Event()
        self.records = 0
        self.first: float | None = None
        self.cpu_first = 0.0
        self.last = 0.0
        self.cpu_last = 0.0
        self.batches = 0

    def started(self) -> None:
        if self.first is None:
            self.first = time.time()
            self.cpu_first = time.process_time()

    def ended(self, records: int) -> None:
        self.records += records
        self.batches += 1
        self.last = time.time()
        self.cpu_last = time.process_time()
        if self.records >= self.target:
            self.done.set()


def build(bootstrap: str, topic: str, group: str, pool: asyncpg.Pool, window: Window) -> FastStream:
    class Clock(BaseMiddleware):
        async def on_receive(self) -> None:
            window.started()

    broker = KafkaBroker(bootstrap, middlewares=[Clock], logger=None)

    @broker.subscriber(
        topic,
        group_id=group,
        auto_offset_reset="earliest",
        batch=True,
        max_records=MAX_RECORDS,
        ack_policy=AckPolicy.NACK_ON_ERROR,
    )
    async def project(events: list[ClusterEvent], message: KafkaMessage) -> None:
        raw = message.raw_message
        records = raw if isinstance(raw, tuple) else (raw,)
        async with pool.acquire() as conn, conn.transaction():
            await apply(conn, events, records)
        window.ended(len(events))

    return FastStream(broker, logger=None)


async def apply(conn: Any, events: list[ClusterEvent], records: tuple[Any, ...]) -> None:
    # Each key is claimed once per batch (its first occurrence), as the engine does.
    first: dict[str, tuple[ClusterEvent, Any]] = {}
    for event, record in zip(events, records, strict=True):
        first.setdefault(event.idempotency_key, (event, record))
    claimed = list(first.values())
    held = await conn.fetchval(
        ENGINE_SQL["claim_keys"],
        CONSUMER,
        dedup_keys(list(first)),
        [e.event_id for e, _ in claimed],
        [r.partition for _, r in claimed],
        [r.offset for _, r in claimed],
    )
    fresh = set(first).difference(key_text(k) for k in held)
    now = datetime.now(UTC)
    newest: dict[UUID, tuple[tuple[datetime, datetime, int, str], ClusterEvent, bytes]] = {}
    losers: list[str] = []
    for event, record in zip(events, records, strict=True):
        if event.idempotency_key not in fresh:
            continue  # handled before (or earlier in this batch)
        fresh.discard(event.idempotency_key)
        p = event.payload
        stamp = EPOCH + timedelta(milliseconds=record.timestamp) if record.timestamp > 0 else now
        order = (min(p.last_observed_at, stamp + SKEW), p.last_observed_at, p.failure_count)
        key = (*order, p.snapshot_hash)
        best = newest.get(p.cluster_id)
        if best is None or key > best[0]:
            if best is not None:
                losers.append(best[1].idempotency_key)
            newest[p.cluster_id] = (key, event, record.value)
        else:
            losers.append(event.idempotency_key)
    winners = list(newest.values())
    written = {
        row["cluster_id"]
        for row in await conn.fetch(
            PROJECTION_SQL["upsert_snapshots"],
            [
                (
                    w[1].payload.cluster_id,
                    w[1].payload.snapshot_hash,
                    w[1].payload.rule_id,
                    w[1].payload.workspace_id,
                    w[1].payload.severity,
                    w[1].payload.failure_count,
                    epoch_micros(w[1].payload.first_observed_at),
                    epoch_micros(w[1].payload.last_observed_at),
                    w[1].payload.suggested_rule_stub,
                    w[2],
                    epoch_micros(w[0][0]),
                    False,  # the prior snapshot is not read here
                )
                for w in winners
            ],
        )
    }
    stale = losers + [
        w[1].idempotency_key for w in winners if w[1].payload.cluster_id not in written
    ]
    if stale:
        await conn.execute(ENGINE_SQL["mark_stale"], CONSUMER, dedup_keys(stale))


async def main(args: argparse.Namespace) -> None:
    pool = await asyncpg.create_pool(
        args.database_url, min_size=1, max_size=2, server_settings={"role": ROLE}
    )
    window = Window(args.records)
    app = build(args.bootstrap, args.topic, args.group, pool, window)

    async def watch() -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(window.done.wait(), args.limit_seconds)
        app.exit()

    watcher = asyncio.create_task(watch())
    try:
        await app.run()
    finally:
        watcher.cancel()
        await pool.close()
    print(
        json.dumps(
            {
                "records": window.records,
                "batches": window.batches,
                "first": window.first,
                "last": window.last,
                "cpu_seconds": window.cpu_last - window.cpu_first,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers.faststream_peer")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--limit-seconds", type=float, default=240.0)
    asyncio.run(main(parser.parse_args()))
    sys.exit(0)
