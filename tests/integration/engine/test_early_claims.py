"""Through a backlog the next batch's transaction claims its keys beside the batch before it
(spectral/engine/engine.py ``_claim_early``, transaction.py ``claim_early``), on the in-memory
transport and the real PostgreSQL. The batch before is its first transaction, held open by the
handler until the test releases it; the test sees the next batch's transaction open beside it
(two sessions of the database in a transaction). Whatever the batch before did with the keys
the early claim left out — applied them, rejected one, failed on one alone — and whatever moved
meanwhile (a revocation, a cancelled run), every event ends applied as the batches one after
another would have applied it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import asyncpg
import pytest
from structlog.testing import capture_logs

from contracts import RefusalReason
from spectral.engine.engine import ConsumerEngine
from spectral.engine.handler import Delivery, HandlerResult, Outcome, Rejection
from spectral.kafka.memory import MemoryBroker
from spectral.kafka.transport import TopicPartition
from spectral.observability.progress import EngineHook
from spectral.settings import Settings
from tests.events import encode, record_key
from tests.integration.engine.test_engine import (  # the same handler and effects table
    RecordingHandler,
    _effects,
    effects_table,  # noqa: F401 - a fixture
)
from tests.integration.engine.test_joined_batches import (
    CountedFetches,
    HeldHandler,
    _append,
    _engine,
    b_joins_while_held,
)
from tests.integration.engine.test_memory_engine import GROUP, _at_end, _topic
from tests.kafka_support import cluster_event
from tests.support import eventually

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("effects_table")]


class RejectsOnce(HeldHandler):
    """A held first transaction that rejects the key ``once`` the first time it sees it."""

    def __init__(self, once: str) -> None:
        super().__init__()
        self.once: str | None = once

    async def apply(
        self, conn: asyncpg.Connection, deliveries: Sequence[Delivery]
    ) -> HandlerResult[None]:
        refused = [d for d in deliveries if d.idempotency_key == self.once]
        if refused:
            self.once = None
        rest = [d for d in deliveries if d not in refused]
        result = await super().apply(conn, rest)
        result.rejected.extend(Rejection(d, "test_refusal", "refused once") for d in refused)
        return result


def _early_claims(engine: ConsumerEngine) -> dict[str, int]:
    """The engine's ``spectral_consumer_early_claims_total``, by outcome."""
    return {
        outcome: int(counter._value.get())
        for outcome, counter in engine.metrics.early_claims.items()
    }


async def _in_transaction(database_url: str, state: str = "idle in transaction%") -> int:
    """Sessions of the test's database whose state is like ``state``: by default in a
    transaction, waiting or aborted."""
    conn = await asyncpg.connect(database_url)
    try:
        n: int = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND state LIKE $1",
            state,
        )
    finally:
        await conn.close()
    return n


async def _open_transactions(database_url: str, count: int) -> None:
    """Wait until ``count`` sessions of the test's database are in a transaction, waiting."""

    async def there() -> bool:
        return await _in_transaction(database_url, "idle in transaction") >= count

    await eventually(there, timeout=10, interval=0.02)


async def test_the_next_batch_is_claimed_beside_a_held_commit_and_each_event_applied_once(
    settings: Settings, database_url: str
) -> None:
    """The batch behind a held transaction opens its own and claims its keys while the first
    is held; a key of the held batch delivered again in it is a duplicate (left out of its
    claim, counted once the held batch committed); every event applied once."""
    broker, topic = MemoryBroker(), _topic(settings)
    broker.create_topic(topic, 1)
    handler = HeldHandler()
    first = [_append(broker, topic), _append(broker, topic)]
    engine = _engine(
        settings, broker, database_url, handler, CountedFetches(), max_batch=4, idle=1.0
    )
    running = asyncio.create_task(engine.run())
    await asyncio.wait_for(handler.holding.wait(), 10)
    first_records = broker.records(topic)
    later = [_append(broker, topic)]
    for record in first_records:  # the held batch's records again, behind it
        broker.append(topic, record.value, key=record.key, partition=0)
    later.append(_append(broker, topic))
    with capture_logs() as logs:
        await _open_transactions(database_url, 2)  # the held one and the one claimed beside it
        handler.release.set()
        summary = await asyncio.wait_for(running, 30)
    assert [e["claimed_early"] for e in logs if e["event"] == "batch"] == [False, True]
    assert _early_claims(engine) == {"kept": 1, "applied_anew": 0}
    effects = await _effects(database_url)
    assert set(effects) == {*first, *later}
    assert set(effects.values()) == {1}
    assert summary.counts[Outcome.DEDUPLICATED] == 2
    assert handler.calls[0] == [(0, 0), (0, 1)]
    # The batch behind it applied its new events only: the repeated ones never reached it.
    assert sorted(handler.calls[1]) == [(0, 2), (0, 5)]
    assert _at_end(broker, topic)


async def test_a_key_the_batch_before_rejected_is_claimed_again(
    settings: Settings, database_url: str
) -> None:
    """The held batch rejects a key (it is forgotten) that the batch claimed beside it holds
    again: that batch is rolled back and applied anew, and the key applied from it, as the
    batches one after another would."""
    broker, topic = MemoryBroker(), _topic(settings)
    broker.create_topic(topic, 1)
    event = cluster_event()
    broker.append(topic, encode(event), key=record_key(event), partition=0)
    handler = RejectsOnce(event.idempotency_key)
    engine = _engine(
        settings, broker, database_url, handler, CountedFetches(), max_batch=4, idle=1.0
    )
    running = asyncio.create_task(engine.run())
    await asyncio.wait_for(handler.holding.wait(), 10)
    behind = [_append(broker, topic)]
    broker.append(topic, encode(event), key=record_key(event), partition=0)
    behind.append(_append(broker, topic))
    with capture_logs() as logs:
        await _open_transactions(database_url, 2)
        handler.release.set()
        summary = await asyncio.wait_for(running, 30)
    assert [e["claimed_early"] for e in logs if e["event"] == "batch"] == [False, False]
    assert _early_claims(engine) == {"kept": 0, "applied_anew": 1}
    effects = await _effects(database_url)
    assert effects == dict.fromkeys([*behind, event.idempotency_key], 1)
    assert summary.counts[Outcome.DEAD_LETTERED] == 1
    assert summary.counts[Outcome.DEDUPLICATED] == 0
    assert _at_end(broker, topic)


async def test_a_key_that_failed_alone_before_is_claimed_again(
    settings: Settings, database_url: str
) -> None:
    """The held batch fails on a record (applied one by one, it is dead-lettered and its key
    not held) that the batch claimed beside it holds again: that batch is applied anew and the
    record fails there too — two dead letters, as the batches one after another give."""
    broker, topic = MemoryBroker(), _topic(settings)
    broker.create_topic(topic, 1)
    handler = HeldHandler()
    engine = _engine(
        settings, broker, database_url, handler, CountedFetches(), max_batch=4, idle=1.0
    )
    running = asyncio.create_task(engine.run())
    event = cluster_event(stub="explode")
    broker.append(topic, encode(event), key=record_key(event), partition=0)
    await asyncio.wait_for(handler.holding.wait(), 10)
    behind = [_append(broker, topic)]
    broker.append(topic, encode(event), key=record_key(event), partition=0)
    await _open_transactions(database_url, 2)
    handler.release.set()
    summary = await asyncio.wait_for(running, 30)
    assert await _effects(database_url) == dict.fromkeys(behind, 1)
    assert summary.counts[Outcome.DEAD_LETTERED] == 2
    letters = broker.records(topic + ".dlq")
    assert [dict(letter.headers)["dlq.reason"] for letter in letters] == [
        RefusalReason.HANDLER_ERROR.value.encode()
    ] * 2
    assert _at_end(broker, topic)


async def test_a_revocation_after_an_early_claim_applies_the_batch_without_what_moved(
    settings: Settings, database_url: str
) -> None:
    """Member a holds its first transaction and claims the next batch (both partitions)
    beside it; member b joins and partition 1 moves to it before a's hold ends. a's early
    claim is rolled back and its batch applied without partition 1's records, which b
    applies: each record once, the group's offsets at the end."""
    broker, topic = MemoryBroker(), _topic(settings)
    broker.create_topic(topic, 2)
    held, hook = HeldHandler(), CountedFetches()
    a = _engine(settings, broker, database_url, held, hook, max_batch=4)
    a_run = asyncio.create_task(a.run())
    keys = [_append(broker, topic, partition=0)]
    await asyncio.wait_for(held.holding.wait(), 10)
    keys += [_append(broker, topic, partition=p) for p in (0, 1, 0, 1)]
    await _open_transactions(database_url, 2)
    await b_joins_while_held(
        settings, broker, topic, database_url, a, a_run, held, hook, max_batch=4
    )
    effects = await _effects(database_url)
    assert set(effects) == set(keys)
    assert set(effects.values()) == {1}
    applied_by_a = {tp for call in held.calls[1:] for tp in call}
    assert applied_by_a == {(0, 1), (0, 2)}
    assert _early_claims(a)["applied_anew"] == 1
    assert broker.committed(GROUP) == {
        TopicPartition(topic, 0): 3,
        TopicPartition(topic, 1): 2,
    }


async def test_a_run_cancelled_after_an_early_claim_rolls_it_back(
    settings: Settings, database_url: str
) -> None:
    """The run is cancelled while its first transaction is held and the next batch claimed
    beside it: both roll back, no session is left in a transaction, nothing is applied; a new
    run applies every event once."""
    broker, topic = MemoryBroker(), _topic(settings)
    broker.create_topic(topic, 1)
    handler = HeldHandler()
    engine = _engine(settings, broker, database_url, handler, CountedFetches(), max_batch=4)
    running = asyncio.create_task(engine.run())
    keys = [_append(broker, topic)]
    await asyncio.wait_for(handler.holding.wait(), 10)
    keys += [_append(broker, topic) for _ in range(3)]  # one fetch: the batch claimed early
    await _open_transactions(database_url, 2)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(running, 30)

    async def none_open() -> bool:
        if await _in_transaction(database_url):
            return False
        conn = await asyncpg.connect(database_url)
        try:
            rows: int = await conn.fetchval("SELECT count(*) FROM core.event_handled")
        finally:
            await conn.close()
        return rows == 0

    await eventually(none_open, timeout=10, interval=0.05)
    assert await _effects(database_url) == {}
    again = _engine(
        settings, broker, database_url, RecordingHandler(), EngineHook(), max_batch=4, idle=1.0
    )
    await asyncio.wait_for(again.run(), 30)
    effects = await _effects(database_url)
    assert effects == dict.fromkeys(keys, 1)
