"""The engine's two steps per batch against the real broker and database: batch N+1's
transaction commits while batch N's offset commit is still under way (a slow Kafka round trip
delays no transaction), and offsets still follow the database strictly.

The consumer's own ``commit`` is wrapped in-process (the broker is real): each call is checked
against ``core.event_handled`` — every record below the offsets it commits is committed in the
database, offsets per partition never go back, no two calls overlap — and the first call is
held until a later batch's transaction has committed (the overlap), or a bound passes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import asyncpg
import pytest
from aiokafka import TopicPartition

from contracts import FAILURE_CLUSTER_DETECTED
from spectral.engine.engine import ConsumerEngine
from spectral.kafka.topics import topic_for
from spectral.kafka.transport import offsets_after
from spectral.observability.progress import EngineHook
from spectral.settings import Settings
from tests.integration.engine.test_engine import (  # the same handler and effects table
    _effects,
    effects_table,  # noqa: F401 - a fixture, used by name
)
from tests.integration.engine.test_engine import _engine as engine_with
from tests.kafka_support import (
    cluster_event,
    committed_offsets,
    create_topics,
    end_offsets,
    publish_envelopes,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("effects_table")]

BATCH = 10
OVERLAP_BOUND = 10.0
"""How long the first offset commit waits for a later batch's transaction to commit (without
the overlap it never does: the later transaction waits for this commit)."""


class CheckedCommits(EngineHook):
    """Wraps the engine's record source's ``commit``; ``fail_at``: the call (1-based) that raises
    instead of committing."""

    def __init__(self, database_url: str, fail_at: int | None = None) -> None:
        self.database_url = database_url
        self.fail_at = fail_at
        self.calls: list[dict[TopicPartition, int]] = []
        self.overlapped: bool | None = None
        self.violations: list[str] = []
        self._busy = False
        self._conn: asyncpg.Connection

    async def started(self, source: Any, pool: Any) -> None:  # noqa: ARG002
        self._conn = await asyncpg.connect(self.database_url)
        commit: Callable[[Sequence[Any]], Awaitable[Mapping[TopicPartition, int]]] = source.commit

        async def checked(records: Sequence[Any]) -> Mapping[TopicPartition, int]:
            offsets = offsets_after(records)
            if self._busy:
                self.violations.append("two offset commits at once")
            self._busy = True
            try:
                await self._check(offsets)
                self.calls.append(dict(offsets))
                if len(self.calls) == 1:
                    self.overlapped = await self._later_batch_committed(sum(offsets.values()))
                if len(self.calls) == self.fail_at:
                    raise RuntimeError("offset commit refused by the test")
                return await commit(records)
            finally:
                self._busy = False

        source.commit = checked

    async def stopped(self) -> None:
        await self._conn.close()

    async def _handled(self, *where: object) -> int:
        sql = "SELECT count(*) FROM core.event_handled WHERE consumer = 'engine-test'"
        if where:
            sql += " AND source_partition = $1 AND source_offset < $2"
        return int(await self._conn.fetchval(sql, *where))

    async def _check(self, offsets: Mapping[TopicPartition, int]) -> None:
        for tp, offset in offsets.items():
            earlier = [call[tp] for call in self.calls if tp in call]
            if earlier and offset < max(earlier):
                self.violations.append(f"{tp} went back to {offset}")
            if await self._handled(tp.partition, offset) != offset:
                self.violations.append(f"{tp}@{offset} ahead of the database")

    async def _later_batch_committed(self, covered: int) -> bool:
        deadline = time.monotonic() + OVERLAP_BOUND
        while time.monotonic() < deadline:
            if await self._handled() > covered:
                return True
            await asyncio.sleep(0.02)
        return False


def _engine(settings: Settings, hook: EngineHook) -> ConsumerEngine:
    return engine_with(settings, max_batch=BATCH, hook=hook)


async def _topic(settings: Settings, kafka_bootstrap: str, events: int) -> tuple[str, set[str]]:
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await create_topics(kafka_bootstrap, [topic], partitions=1)
    published = [cluster_event() for _ in range(events)]
    await publish_envelopes(kafka_bootstrap, topic, published)
    return topic, {e.idempotency_key for e in published}


async def _all_once_and_committed(
    settings: Settings, kafka_bootstrap: str, database_url: str, topic: str, keys: set[str]
) -> None:
    effects = await _effects(database_url)
    assert set(effects) == keys
    assert set(effects.values()) == {1}
    group = settings.topic_prefix + "engine-test"
    committed = await committed_offsets(kafka_bootstrap, group, topic)
    assert committed == await end_offsets(kafka_bootstrap, topic)


async def test_a_slow_offset_commit_does_not_hold_back_the_next_transaction(
    settings: Settings, kafka_bootstrap: str, database_url: str
) -> None:
    topic, keys = await _topic(settings, kafka_bootstrap, 6 * BATCH)
    hook = CheckedCommits(database_url)
    engine = _engine(settings, hook)

    await engine.run()

    assert hook.overlapped is True, "the next transaction waited for the offset commit"
    assert hook.violations == []
    await _all_once_and_committed(settings, kafka_bootstrap, database_url, topic, keys)


async def test_after_a_failed_offset_commit_nothing_later_is_committed(
    settings: Settings, kafka_bootstrap: str, database_url: str
) -> None:
    topic, keys = await _topic(settings, kafka_bootstrap, 6 * BATCH)
    hook = CheckedCommits(database_url, fail_at=2)

    with pytest.raises(RuntimeError, match="refused by the test"):
        await _engine(settings, hook).run()

    assert len(hook.calls) == 2  # none after the failing one
    assert hook.violations == []
    group = settings.topic_prefix + "engine-test"
    first = hook.calls[0][TopicPartition(topic, 0)]
    assert await committed_offsets(kafka_bootstrap, group, topic) == {0: first}
    # A later batch committed in the database beside the failing acknowledgement: redelivered
    # by the next run, it is deduplicated.
    assert len(await _effects(database_url)) > first

    again = CheckedCommits(database_url)
    await _engine(settings, again).run()
    assert again.violations == []
    await _all_once_and_committed(settings, kafka_bootstrap, database_url, topic, keys)
