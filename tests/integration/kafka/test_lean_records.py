"""The consumer's lean record path (spectral/kafka/aiokafka_records.py) against the real broker:
``getmany`` hands over exactly the records aiokafka's own path hands over — the same offsets,
keys, values, headers and timestamps, in the same order, at the same positions, whatever
``max_records`` cuts the fetched records into — and skips what aiokafka skips under
``read_committed`` (aborted transactions, control batches)."""

from __future__ import annotations

import gc
from collections.abc import Sequence
from typing import Any

import aiokafka
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.consumer import fetcher as _fetcher

from spectral.kafka.aiokafka_records import LeanRecord, applies, lean
from tests.kafka_support import create_topics, publish

pytestmark = pytest.mark.integration

Seen = tuple[str, int, int, int, int, bytes | None, bytes | None, tuple[tuple[str, Any], ...]]


def _seen(record: Any) -> Seen:
    return (
        record.topic,
        record.partition,
        record.offset,
        record.timestamp,
        record.timestamp_type,
        record.key,
        record.value,
        tuple(tuple(header) for header in record.headers),
    )


async def _read(
    bootstrap: str,
    topic: str,
    partitions: int,
    *,
    lean_path: bool,
    max_records: int,
    isolation_level: str = "read_committed",
) -> tuple[list[Seen], dict[int, int]]:
    """Every record of ``topic`` through getmany(max_records=...), and the positions after."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        isolation_level=isolation_level,
        max_partition_fetch_bytes=2048,  # several fetches per partition
    )
    await consumer.start()
    try:
        if lean_path:
            assert lean(consumer)
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        seen: list[Seen] = []
        for _ in range(2_000):
            if all([await consumer.position(tp) >= ends[tp] for tp in tps]):
                break
            fetched = await consumer.getmany(timeout_ms=200, max_records=max_records)
            assert sum(map(len, fetched.values())) <= max_records
            for records in fetched.values():
                if lean_path:
                    assert all(type(record) is LeanRecord for record in records)
                seen.extend(map(_seen, records))
        return seen, {tp.partition: await consumer.position(tp) for tp in tps}
    finally:
        await consumer.stop()


def _by_partition(seen: Sequence[Seen]) -> dict[int, list[Seen]]:
    out: dict[int, list[Seen]] = {}
    for record in seen:
        out.setdefault(record[1], []).append(record)
    return out


@pytest.mark.parametrize("max_records", [1, 7, 2000])
async def test_lean_records_are_the_records_aiokafka_hands_over(
    kafka_bootstrap: str, topic_prefix: str, max_records: int
) -> None:
    topic = topic_prefix + "lean"
    await create_topics(kafka_bootstrap, [topic], partitions=3)
    records = [
        (None if i % 5 == 0 else f"k{i % 11}".encode(), f"value {i} ".encode() * (i % 40))
        for i in range(150)
    ]
    headers = [
        [] if i % 3 else [("h", f"{i}".encode()), ("empty", b""), ("again", b"x")]
        for i in range(150)
    ]
    await publish(kafka_bootstrap, topic, records, headers)
    plain, plain_positions = await _read(
        kafka_bootstrap, topic, 3, lean_path=False, max_records=max_records
    )
    leaned, lean_positions = await _read(
        kafka_bootstrap, topic, 3, lean_path=True, max_records=max_records
    )
    assert len(plain) == 150
    assert _by_partition(leaned) == _by_partition(plain)
    assert lean_positions == plain_positions


@pytest.mark.parametrize("isolation_level", ["read_committed", "read_uncommitted"])
async def test_aborted_transactions_are_skipped_as_aiokafka_skips_them(
    kafka_bootstrap: str, topic_prefix: str, isolation_level: str
) -> None:
    topic = topic_prefix + "lean-tx"
    await create_topics(kafka_bootstrap, [topic], partitions=1)
    await publish(kafka_bootstrap, topic, [(b"k", b"before")])
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, transactional_id=topic_prefix + "tx"
    )
    await producer.start()
    try:
        for outcome, values in (
            ("commit", [b"committed 1", b"committed 2"]),
            ("abort", [b"aborted 1", b"aborted 2", b"aborted 3"]),
            ("commit", [b"committed 3"]),
            ("abort", [b"aborted 4"]),
        ):
            await producer.begin_transaction()
            for value in values:
                await producer.send_and_wait(topic, value=value, key=b"k")
            if outcome == "commit":
                await producer.commit_transaction()
            else:
                await producer.abort_transaction()
    finally:
        await producer.stop()
    await publish(kafka_bootstrap, topic, [(b"k", b"after")])
    for max_records in (1, 2, 2000):
        plain, plain_positions = await _read(
            kafka_bootstrap,
            topic,
            1,
            lean_path=False,
            max_records=max_records,
            isolation_level=isolation_level,
        )
        leaned, lean_positions = await _read(
            kafka_bootstrap,
            topic,
            1,
            lean_path=True,
            max_records=max_records,
            isolation_level=isolation_level,
        )
        assert leaned == plain
        assert lean_positions == plain_positions
    read: list[bytes | None] = [record[6] for record in leaned]
    if isolation_level == "read_committed":
        assert read == [b"before", b"committed 1", b"committed 2", b"committed 3", b"after"]
    else:
        assert len(read) == 9


async def test_the_lean_path_stays_off_for_an_aiokafka_it_was_not_written_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert applies()
    monkeypatch.setattr(aiokafka, "__version__", "0.15.0")
    assert not applies()

    class Started:
        _fetcher = object()

    assert not lean(Started())
    assert not lean(AIOKafkaConsumer())  # not started: no fetcher


async def test_drained_records_are_freed_without_the_garbage_collector(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    """A consumer runs with the cyclic collector tuned to run seldom (collector.py): records
    handed over must be freed by reference counting, with the fetched buffers they hold."""
    topic = topic_prefix + "lean-gc"
    await create_topics(kafka_bootstrap, [topic], partitions=2)
    await publish(kafka_bootstrap, topic, [(b"k", b"v" * 100)] * 60)
    gc.collect()
    gc.disable()
    try:
        seen, _ = await _read(kafka_bootstrap, topic, 2, lean_path=True, max_records=7)
        alive = [o for o in gc.get_objects() if type(o) is _fetcher.PartitionRecords]
    finally:
        gc.enable()
    assert len(seen) == 60
    assert alive == []
