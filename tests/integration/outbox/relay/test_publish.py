"""The relay's publishers against the real broker (and, for the marks, the real outbox): where
each record lands, in which order, what a record too large for the producer gets, and which
rows of a batch Kafka took only in part are marked published."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import asyncpg
import pytest
from aiokafka.errors import MessageSizeTooLargeError, RequestTimedOutError
from aiokafka.partitioner import murmur2

from contracts import MAX_PRODUCE_BYTES
from spectral.faults import Refusal, refusal_of
from spectral.outbox.relay import RelayReport
from spectral.outbox.relay.publish import BatchPublisher, Outcome, Outgoing, Publisher
from spectral.outbox.relay.relay import BrokerUnavailableError
from spectral.outbox.relay.repository import RelayRepository
from spectral.outbox.relay.shards import SHARD_COUNT
from spectral.settings import Settings
from tests.integration.outbox.relay.support import (
    EVENT_TYPE,
    assert_in_order_without_gaps,
    by_key,
    enqueue_numbered,
    key_id,
    make_relay,
    read_topic,
)
from tests.kafka_support import PRODUCING, TRANSPORTS, create_topics, read_all

pytestmark = pytest.mark.integration

PARTITIONS = 6


def _records(topic: str, keys: int, per_key: int, size: int = 200) -> list[Outgoing]:
    """``per_key`` numbered records of each key, the keys interleaved."""
    return [
        (
            topic,
            f"key-{k}".encode(),
            f"{k}:{n}:".encode().ljust(size, b"."),
            [("n", str(n).encode())],
        )
        for n in range(per_key)
        for k in range(keys)
    ]


async def _acknowledged(outcomes: list[Outcome]) -> None:
    for outcome in outcomes:
        assert isinstance(outcome, asyncio.Future)
        await outcome


async def test_a_batch_lands_on_each_keys_murmur2_partition_in_order_whatever_its_size(
    settings: Settings, kafka_bootstrap: str, topic_prefix: str
) -> None:
    """One publish of 40 keys x 25 records with partition batches of 4 KiB (several batches
    per partition, sent one after the other): every record where murmur2 puts its key (as
    aiokafka's and the Java client's default partitioner), with its headers, in order."""
    topic = topic_prefix + "batches"
    await create_topics(kafka_bootstrap, [topic], PARTITIONS)
    publisher = make_relay(settings, max_batch_bytes=4096)._producer()
    assert isinstance(publisher, BatchPublisher)
    records = _records(topic, 40, 25)
    await publisher.start()
    try:
        outcomes, failure = await publisher.publish(records)
        assert failure is None
        assert len(outcomes) == len(records)
        await _acknowledged(outcomes)
    finally:
        await publisher.stop()
    seen: dict[bytes, list[int]] = defaultdict(list)
    got = await read_all(kafka_bootstrap, topic)
    assert len(got) == len(records)
    for record in sorted(got, key=lambda r: (r.partition, r.offset)):
        assert record.key is not None
        assert record.partition == (murmur2(record.key) & 0x7FFFFFFF) % PARTITIONS
        n = int(record.value.split(b":")[1])
        assert record.headers == (("n", str(n).encode()),)
        seen[record.key].append(n)
    assert all(numbers == list(range(25)) for numbers in seen.values())
    assert len(seen) == 40


async def test_a_record_over_the_producers_limit_is_refused_and_the_rest_go(
    settings: Settings, kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = topic_prefix + "limit"
    await create_topics(kafka_bootstrap, [topic], PARTITIONS)
    publisher = make_relay(settings)._producer()
    records = _records(topic, 3, 2)
    huge: Outgoing = (topic, b"key-1", b"x" * MAX_PRODUCE_BYTES, [])
    records.insert(2, huge)
    await publisher.start()
    try:
        outcomes, failure = await publisher.publish(records)
        assert failure is None
        refused = outcomes.pop(2)
        assert isinstance(refused, MessageSizeTooLargeError)
        assert refusal_of(refused) is Refusal.TOO_LARGE
        await _acknowledged(outcomes)
    finally:
        await publisher.stop()
    assert len(await read_all(kafka_bootstrap, topic)) == 6


class _HalfLost:
    """The real publisher; the acknowledgements of the keys ``lost`` are lost (their records
    reach the topic, the relay learns nothing of them), and the sending stops before the
    records from ``cut`` on."""

    def __init__(self, inner: Publisher, lost: set[bytes], cut: int) -> None:
        self._inner = inner
        self._lost = lost
        self._cut = cut

    async def start(self) -> None:
        await self._inner.start()

    async def stop(self) -> None:
        await self._inner.stop()

    async def publish(
        self, records: Sequence[Outgoing]
    ) -> tuple[list[Outcome], BaseException | None]:
        sent, _ = await self._inner.publish(records[: self._cut])
        outcomes: list[Outcome] = []
        for (_, key, _, _), outcome in zip(records, sent, strict=False):
            if key in self._lost and isinstance(outcome, asyncio.Future):
                await outcome
                lost: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                lost.set_exception(RequestTimedOutError())
                outcomes.append(lost)
            else:
                outcomes.append(outcome)
        return outcomes + [None] * (len(records) - len(outcomes)), RequestTimedOutError()


async def test_a_batch_kafka_took_in_part_marks_only_rows_it_took_after_all_of_their_keys_before(
    settings: Settings, database_url: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    """Keys 0-3, five rows each, interleaved; the acknowledgements of key 1's rows are lost and
    the sending stops before the last five rows: marked are keys 0, 2 and 3's rows up to the
    cut, nothing of key 1, nothing after the cut; the session ends on the fault."""
    await create_topics(kafka_bootstrap, [topic_prefix + EVENT_TYPE], PARTITIONS)
    ids = await enqueue_numbered(
        database_url, [(key_id(k), s) for s in range(1, 6) for k in range(4)]
    )
    relay = make_relay(settings)
    lost = str(key_id(1)).encode()
    publisher = _HalfLost(relay._producer(), {lost}, cut=15)
    repo = await RelayRepository.open(database_url)
    await publisher.start()
    try:
        assert len(await repo.try_lock(list(range(SHARD_COUNT)), SHARD_COUNT)) == SHARD_COUNT
        rows = await repo.fetch_batch(list(range(SHARD_COUNT)), 100)
        assert [r.id for r in rows] == ids
        flight = await relay._send(publisher, rows, {}, 0.0)
        with pytest.raises(BrokerUnavailableError):
            await relay._land(repo, publisher, flight, report=RelayReport())
    finally:
        await publisher.stop()
        await repo.close()
    published = await _published(database_url)
    expected = {row.id for row in rows[:15] if row.record_key != str(key_id(1))}
    assert published == expected


async def _published(database_url: str) -> set[int]:
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch("SELECT id FROM core.outbox WHERE published_at IS NOT NULL")
    finally:
        await conn.close()
    return {int(r["id"]) for r in rows}


@pytest.mark.parametrize("transport", PRODUCING)
async def test_a_keys_rows_keep_their_order_through_small_batches_in_flight(
    settings: Settings, database_url: str, kafka_bootstrap: str, topic_prefix: str, transport: str
) -> None:
    """Relay batches of 16 rows (two in flight), partition batches of 2 KiB: 24 keys x 20
    rows arrive in order, each once."""
    settings = settings.replace(**TRANSPORTS[transport])
    await create_topics(kafka_bootstrap, [topic_prefix + EVENT_TYPE], PARTITIONS)
    await enqueue_numbered(database_url, [(key_id(k), s) for s in range(1, 21) for k in range(24)])
    relay = make_relay(settings, batch=16, batch_growth=1, once=True, max_batch_bytes=2048)
    report = await relay.run()
    assert report.published == 24 * 20
    seqs = by_key(await read_topic(kafka_bootstrap, topic_prefix + EVENT_TYPE))
    assert len(seqs) == 24
    for numbers in seqs.values():
        assert_in_order_without_gaps(numbers, 20)
        assert len(numbers) == 20
