"""Dead-letter tools over a dead-letter topic of large records, on the real broker and
database: listings page through it without loading values, a redrive sends every dead letter
it selects while holding one bounded batch at a time.

Memory is the peak of Python's own allocations during a call (tracemalloc), over that of the
same call on an empty topic (the clients' own buffers and the cluster's metadata): the values
read from Kafka are bytes objects, so holding the topic shows up whole.
"""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import Awaitable
from typing import Any, TypeVar

import pytest
from aiokafka import AIOKafkaProducer

from contracts import FAILURE_CLUSTER_DETECTED
from spectral.dlq import records as dlq_records
from spectral.dlq import redrive as dlq_redrive
from spectral.dlq.records import count_reasons, list_dead_letters
from spectral.dlq.redrive import redrive
from spectral.dlq.repository import connect_operator
from spectral.kafka.topics import dlq_topic, topic_for
from spectral.settings import Settings
from tests.integration.replay.support import endpoints, fetchval, spectral_cli
from tests.kafka_support import create_topics, end_offsets

pytestmark = pytest.mark.integration

T = TypeVar("T")
LETTERS = 30
VALUE_BYTES = 800_000  # 24 MB in all
MiB = 1024 * 1024


async def _peak(call: Awaitable[T]) -> tuple[T, int]:
    """The call's result and the peak of Python's allocations while it ran (bytes)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        result = await call
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


async def _baseline(settings: Settings) -> int:
    """The peak of a redrive dry run of a topic that does not exist."""
    bootstrap, url = endpoints(settings)
    conn = await connect_operator(settings, url)
    try:
        nothing = redrive(
            settings, bootstrap, conn, topic=settings.topic_prefix + "none", dry_run=True
        )
        return (await _peak(nothing))[1]
    finally:
        await conn.close()


async def _fill(bootstrap: str, topic: str) -> str:
    """LETTERS dead letters of VALUE_BYTES each on two partitions of ``topic``.dlq, reasons
    alternating."""
    dlq = dlq_topic(topic)
    big = {"max.message.bytes": str(2 * MiB)}
    await create_topics(bootstrap, [topic, dlq], partitions=2, configs=big)
    letters = []
    for i in range(LETTERS):
        headers = [
            ("dlq.reason", b"not_json" if i % 3 == 0 else b"handler_error"),
            ("dlq.source.topic", topic.encode()),
            ("dlq.source.partition", b"0"),
            ("dlq.source.offset", str(i).encode()),
            ("dlq.consumer", b"rule-candidates"),
        ]
        letters.append((i % 2, f"k{i}".encode(), bytes([65 + i % 26]) * VALUE_BYTES, headers))
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_request_size=2 * MiB)
    await producer.start()
    try:
        for partition, key, value, headers in letters:
            await producer.send_and_wait(dlq, value, key=key, headers=headers, partition=partition)
    finally:
        await producer.stop()
    return dlq


async def test_listings_page_through_large_dead_letters_without_loading_them(
    settings: Settings, kafka_bootstrap: str, spectral_env: dict[str, str]
) -> None:
    dlq = await _fill(kafka_bootstrap, topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix))
    base = await _baseline(settings)

    first, peak = await _peak(list_dead_letters(settings, kafka_bootstrap, dlq, limit=7))
    assert peak - base < 4 * MiB, f"a page of 7 held {(peak - base) / MiB:.1f} MiB more"
    assert first.total == LETTERS
    assert [s.position for s in first.summaries] == [(0, o) for o in range(7)]
    assert first.summaries[0].value_size == VALUE_BYTES
    assert first.next_after == (0, 6)
    assert not first.truncated

    # Following next_after visits every dead letter once, in (partition, offset) order.
    seen: list[tuple[int, int]] = []
    after = None
    while True:
        page = await list_dead_letters(settings, kafka_bootstrap, dlq, limit=7, after=after)
        seen.extend(s.position for s in page.summaries)
        if page.next_after is None:
            break
        after = page.next_after
    assert seen == [(p, o) for p in (0, 1) for o in range(LETTERS // 2)]

    # A filter that matches little stops at the read limit and says where to go on from.
    cut = await list_dead_letters(
        settings, kafka_bootstrap, dlq, reason="not_json", limit=100, scan_records=6
    )
    assert cut.truncated
    assert cut.scanned == 6
    assert cut.next_after == (0, 5)
    assert [s.reason for s in cut.summaries] == ["not_json"] * 2

    counts, peak = await _peak(count_reasons(settings, kafka_bootstrap, dlq))
    assert peak - base < 4 * MiB, f"counting held {(peak - base) / MiB:.1f} MiB more"
    assert counts.by_reason == {"not_json": 10, "handler_error": 20}
    assert not counts.truncated

    # The CLI pages the same way; the rest is announced on stderr.
    listed = await asyncio.to_thread(
        spectral_cli, spectral_env, "dlq", "list", "--topic", dlq, "--limit", "4", "--json"
    )
    assert listed.returncode == 0, listed.stderr
    assert "--after 0:3" in listed.stderr


async def test_redrive_sends_every_selected_dead_letter_holding_one_batch_at_a_time(
    settings: Settings,
    kafka_bootstrap: str,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await _fill(kafka_bootstrap, topic)
    # Batches of ~1 MiB (the default is 16 MiB) and a report listing 5, so that the bound shows
    # on a 24 MB topic: 24 batches' worth.
    monkeypatch.setattr(dlq_records, "SCAN_BATCH_BYTES", 1 * MiB, raising=False)
    monkeypatch.setattr(dlq_redrive, "REPORT_LIMIT", 5, raising=False)
    base = await _baseline(settings)
    bootstrap, url = endpoints(settings)
    conn = await connect_operator(settings, url)
    try:
        planned, peak = await _peak(
            redrive(settings, bootstrap, conn, topic=topic, reason="handler_error", dry_run=True)
        )
        assert peak - base < 8 * MiB, f"a dry run held {(peak - base) / MiB:.1f} MiB more"
        sent, peak = await _peak(redrive(settings, bootstrap, conn, topic=topic))
        # A batch read (and the record that ended it), its copy in the producer's buffers, two
        # copies of the produce request while it is encoded, a slow broker's unsent part of it
        # and the client's fetch read-ahead: a few batches, never the 24 MB topic (measured 5.3
        # MiB; with 2 MiB batches 7.5-8.8, and ~11 with the broker reading slowly, too close to
        # a bound of 12 that once failed under load).
        assert peak - base < 10 * MiB, f"a redrive held {(peak - base) / MiB:.1f} MiB more"
        again = await redrive(settings, bootstrap, conn, topic=topic)
    finally:
        await conn.close()

    report: Any = planned.to_json()
    assert report["would_redrive"] == 20
    assert report["redriven"] == 0  # a dry run redrives nothing
    assert len(report["records"]) == 5
    assert report["records_truncated"] is True
    assert sent.to_json()["redriven"] == LETTERS
    assert sent.to_json()["would_redrive"] is None
    assert sum((await end_offsets(kafka_bootstrap, topic)).values()) == LETTERS
    assert await fetchval(database_url, "SELECT count(*) FROM core.dlq_redrives") == LETTERS
    assert again.to_json()["redriven"] == 0
    assert again.skipped == {"already_redriven": LETTERS}
