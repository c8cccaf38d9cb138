"""Batches fetched while the batch before them waits for a slow commit join one transaction
(spectral/engine/engine.py ``_join``), on the in-memory transport and the real PostgreSQL: the
joined batch is one transaction, keeps each partition's order and the ``max_batch`` bound, its
bad records are dead-lettered as in any batch, and a revocation while batches are joined drops
their records of the partitions that move (their new owner applies them) and only those.

The slow commit is the handler's first transaction held open until the test releases it."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
from typing import Any

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from contracts import RefusalReason
from spectral.engine.engine import ConsumerEngine, EngineOptions
from spectral.engine.handler import Delivery, HandlerResult, Outcome
from spectral.kafka.memory import MemoryBroker, MemoryTransport
from spectral.kafka.transport import TopicPartition
from spectral.observability.progress import EngineHook
from spectral.settings import Settings
from tests.events import encode, record_key
from tests.integration.engine.test_engine import (  # the same handler and effects table
    RecordingHandler,
    _effects,
    effects_table,  # noqa: F401 - a fixture
)
from tests.integration.engine.test_memory_engine import GROUP, _at_end, _topic
from tests.kafka_support import cluster_event
from tests.support import eventually

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("effects_table")]


class HeldHandler(RecordingHandler):
    """Holds its first transaction open until ``release`` is set; notes every call's
    deliveries (before the effect: a call that fails is noted too)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.holding = asyncio.Event()
        self.calls: list[list[tuple[int, int]]] = []

    async def apply(
        self, conn: asyncpg.Connection, deliveries: Sequence[Delivery]
    ) -> HandlerResult[None]:
        self.calls.append([(d.partition, d.offset) for d in deliveries])
        if len(self.calls) == 1:
            self.holding.set()
            await self.release.wait()
        return await super().apply(conn, deliveries)


class CountedFetches(EngineHook):
    """Counts the records the engine's source handed over; notes a revocation's start."""

    def __init__(self) -> None:
        self.fetched = 0
        self.revoking_started = asyncio.Event()

    def revoking(self, partitions: Collection[TopicPartition]) -> None:  # noqa: ARG002
        self.revoking_started.set()

    async def started(self, source: Any, pool: Any) -> None:  # noqa: ARG002
        fetch = source.fetch

        async def counted(timeout_ms: int) -> Sequence[Any]:
            records: Sequence[Any] = await fetch(timeout_ms)
            self.fetched += len(records)
            return records

        source.fetch = counted


def _engine(
    settings: Settings,
    broker: MemoryBroker,
    database_url: str,
    handler: RecordingHandler,
    hook: EngineHook,
    *,
    max_batch: int,
    idle: float | None = None,
) -> ConsumerEngine:
    return ConsumerEngine(
        handler,
        settings,
        transport=MemoryTransport(broker),
        database_url=database_url,
        options=EngineOptions(
            group=GROUP, max_batch=max_batch, stop_when_idle=idle, poll_timeout_ms=20
        ),
        registry=CollectorRegistry(),
        hook=hook,
    )


def _append(
    broker: MemoryBroker, topic: str, *, partition: int = 0, stub: str | None = None
) -> str:
    event = cluster_event(stub=stub)
    broker.append(topic, encode(event), key=record_key(event), partition=partition)
    return event.idempotency_key


async def b_joins_while_held(  # noqa: PLR0917 - the scene's parts
    settings: Settings,
    broker: MemoryBroker,
    topic: str,
    database_url: str,
    a: ConsumerEngine,
    a_run: asyncio.Task[Any],
    held: HeldHandler,
    hook: CountedFetches,
    *,
    max_batch: int,
) -> None:
    """Member b joins the group while member a's first transaction is held; a's revocation
    waits for it, then the hold ends; both run until every record is consumed, and stop."""
    b = _engine(
        settings, broker, database_url, RecordingHandler(), EngineHook(), max_batch=max_batch
    )
    b_run = asyncio.create_task(b.run())
    # b joined: a's revocation of the partition that moves waits for the held transaction.
    await asyncio.wait_for(hook.revoking_started.wait(), 10)
    held.release.set()

    async def at_end() -> bool:
        return _at_end(broker, topic)

    await eventually(at_end, timeout=30, interval=0.05)
    a.stop()
    b.stop()
    await asyncio.wait_for(asyncio.gather(a_run, b_run), 30)


async def _fetched(hook: CountedFetches, records: int) -> None:
    async def done() -> bool:
        return hook.fetched >= records

    await eventually(done, timeout=10, interval=0.01)


async def test_batches_behind_a_held_commit_join_one_transaction_up_to_the_bound(
    settings: Settings, database_url: str
) -> None:
    """One record a fetch while the first transaction is held: the records fetched meanwhile
    are applied in transactions of up to ``max_batch`` (not one each), in offset order, each
    once; a rejected and a failing record among them are dead-lettered with their reasons and
    the rest of their joined batch applied."""
    broker, topic = MemoryBroker(), _topic(settings)
    broker.create_topic(topic, 1)
    handler, hook = HeldHandler(), CountedFetches()
    engine = _engine(settings, broker, database_url, handler, hook, max_batch=5, idle=0.5)
    running = asyncio.create_task(engine.run())
    keys = [_append(broker, topic)]
    await asyncio.wait_for(handler.holding.wait(), 10)
    stubs = {3: "reject", 6: "explode"}
    for index in range(1, 9):
        keys.append(_append(broker, topic, stub=stubs.get(index)))
        await _fetched(hook, index + 1)  # each record its own fetch
    handler.release.set()
    summary = await asyncio.wait_for(running, 30)

    # Held first: 1; then 5 joined (the bound) and 3 joined. The one with the failing record
    # fails whole and is applied one by one.
    sizes = [len(call) for call in handler.calls]
    assert sizes[:3] == [1, 5, 3], sizes
    assert handler.calls[1] == [(0, offset) for offset in range(1, 6)]
    assert handler.calls[2] == [(0, offset) for offset in range(6, 9)]
    good = [key for index, key in enumerate(keys) if index not in stubs]
    effects = await _effects(database_url)
    assert set(effects) == set(good)
    assert set(effects.values()) == {1}
    assert summary.counts[Outcome.DEAD_LETTERED] == 2
    letters = broker.records(topic + ".dlq")
    reasons = {
        dict(letter.headers)["dlq.source.offset"]: dict(letter.headers)["dlq.reason"]
        for letter in letters
    }
    assert reasons == {
        b"3": RefusalReason.HANDLER_REJECTED.value.encode(),
        b"6": RefusalReason.HANDLER_ERROR.value.encode(),
    }
    assert _at_end(broker, topic)


async def test_a_revocation_while_batches_are_joined_drops_only_the_partitions_that_move(
    settings: Settings, database_url: str
) -> None:
    """Member a holds its first transaction; records of both partitions are fetched and joined
    behind it; member b joins (partition 1 moves to it) before a's hold ends. a applies its
    joined batch without the records of partition 1; b applies those; each record once, the
    group's offsets at the end."""
    broker, topic = MemoryBroker(), _topic(settings)
    broker.create_topic(topic, 2)
    held, hook = HeldHandler(), CountedFetches()
    a = _engine(settings, broker, database_url, held, hook, max_batch=50)
    a_run = asyncio.create_task(a.run())
    keys = [_append(broker, topic, partition=0)]
    await asyncio.wait_for(held.holding.wait(), 10)
    for index in range(1, 9):
        keys.append(_append(broker, topic, partition=index % 2))
        await _fetched(hook, index + 1)
    await b_joins_while_held(
        settings, broker, topic, database_url, a, a_run, held, hook, max_batch=50
    )
    effects = await _effects(database_url)
    assert set(effects) == set(keys)
    assert set(effects.values()) == {1}
    # a's transactions after the hold hold none of partition 1's records fetched before it.
    applied_by_a = {tp for call in held.calls[1:] for tp in call}
    assert applied_by_a == {(0, offset) for offset in range(1, 5)}
    assert broker.committed(GROUP) == {
        TopicPartition(topic, 0): 5,
        TopicPartition(topic, 1): 4,
    }
