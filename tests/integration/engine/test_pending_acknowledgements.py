"""Batches whose transaction committed but whose acknowledgement (dead letters, offset commit)
is still under way, against the real broker and database: a second member joining the group,
a graceful stop, ``stop_when_idle`` and a failing dead-letter sink must neither commit an
offset ahead of the database (or for a partition this member no longer owns) nor lose a record.

The members' own ``commit`` is wrapped in-process (the broker is real) and each call checked
against ``core.event_handled``; one call is held (a slow Kafka round trip) until the test lets
it go.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any

import asyncpg
import pytest
from aiokafka import TopicPartition
from prometheus_client import CollectorRegistry

from contracts import FAILURE_CLUSTER_DETECTED
from spectral.engine.dead_letters import DeadLetterSink
from spectral.engine.engine import ConsumerEngine, EngineOptions
from spectral.engine.handler import Delivery, HandlerResult
from spectral.errors import ConfigurationError
from spectral.kafka.dlq import DeadLetter
from spectral.kafka.topics import dlq_topic, topic_for
from spectral.kafka.transport import offsets_after
from spectral.observability.progress import EngineHook
from spectral.settings import Settings
from tests.integration.engine.test_engine import (  # the same handler and effects table
    RecordingHandler,
    _effects,
    effects_table,  # noqa: F401 - a fixture, used by name
)
from tests.kafka_support import (
    TRANSPORTS,
    cluster_event,
    committed_offsets,
    create_topics,
    end_offsets,
    publish_envelopes,
    read_all,
)
from tests.support import eventually

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("effects_table")]

BATCH = 10
BOUND = 30.0
"""How long a held step waits for the condition the test sets up (never reached: a failure)."""


async def _handled(conn: asyncpg.Connection, partition: int | None = None, below: int = 0) -> int:
    sql = "SELECT count(*) FROM core.event_handled WHERE consumer = 'engine-test'"
    if partition is None:
        return int(await conn.fetchval(sql))
    sql += " AND source_partition = $1 AND source_offset < $2"
    return int(await conn.fetchval(sql, partition, below))


async def _until(check: Callable[[], Awaitable[bool]]) -> bool:
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        if await check():
            return True
        await asyncio.sleep(0.02)
    return False


class Group:
    """What every member of one group committed: offsets per partition never go back."""

    def __init__(self) -> None:
        self.committed: dict[TopicPartition, int] = {}
        self.violations: list[str] = []
        self.dead_lettered: set[tuple[int, int]] = set()
        """(partition, offset) of records dead-lettered by the handler: not kept as handled."""


class Member(EngineHook):
    """Wraps a member's record source's ``commit``: every record below the offsets is committed
    in the database, offsets never go back across the group, and the partitions are this
    member's (between a revocation and the next assignment it owns none). ``hold(call)``: a
    predicate on the offsets of each call; the first call it accepts waits for ``release``."""

    def __init__(
        self,
        database_url: str,
        group: Group,
        hold: Callable[[Mapping[TopicPartition, int]], bool] | None = None,
    ) -> None:
        self.database_url = database_url
        self.group = group
        self.hold = hold
        self.holding = asyncio.Event()
        self.release = asyncio.Event()
        self.owned: set[TopicPartition] = set()
        self.revocations = 0
        self.revocation_started = asyncio.Event()
        self.calls: list[dict[TopicPartition, int]] = []
        self._conn: asyncpg.Connection

    def assigned(self, partitions: Collection[TopicPartition]) -> None:
        self.owned |= set(partitions)

    def revoking(self, partitions: Collection[TopicPartition]) -> None:  # noqa: ARG002
        self.revocation_started.set()

    def revoked(self, partitions: Collection[TopicPartition]) -> None:
        self.owned -= set(partitions)
        self.revocations += 1

    async def started(self, source: Any, pool: Any) -> None:  # noqa: ARG002
        self._conn = await asyncpg.connect(self.database_url)
        commit: Callable[[Sequence[Any]], Awaitable[Mapping[TopicPartition, int]]] = source.commit

        async def checked(records: Sequence[Any]) -> Mapping[TopicPartition, int]:
            assigned = source.assignment()
            offsets = {tp: o for tp, o in offsets_after(records).items() if tp in assigned}
            if offsets and self.hold is not None and self.hold(offsets):
                self.hold = None
                self.holding.set()
                await asyncio.wait_for(self.release.wait(), timeout=BOUND)
            await self._check(offsets)
            committed = await commit(records)
            if committed:
                self.calls.append(dict(committed))
            self.group.committed.update(committed)
            return committed

        source.commit = checked

    async def stopped(self) -> None:
        await self._conn.close()

    async def _check(self, offsets: Mapping[TopicPartition, int]) -> None:
        violations = self.group.violations
        for tp, offset in offsets.items():
            if tp not in self.owned:
                violations.append(f"{tp}@{offset} committed by a member that does not own it")
            if offset < self.group.committed.get(tp, 0):
                violations.append(f"{tp} went back to {offset}")
            holes = sum(1 for p, o in self.group.dead_lettered if p == tp.partition and o < offset)
            if await _handled(self._conn, tp.partition, offset) != offset - holes:
                violations.append(f"{tp}@{offset} ahead of the database")


class RefusedHandler(RecordingHandler):
    """A delivery whose stub is "forbid" runs its statement as a role the database refuses
    (``spectral_projector`` has no grant on the test's table): the deployment's configuration,
    so the engine stops with a ConfigurationError."""

    def __init__(self) -> None:
        self.refused = asyncio.Event()

    async def apply(
        self, conn: asyncpg.Connection, deliveries: Sequence[Delivery]
    ) -> HandlerResult[None]:
        if any(d.envelope.payload.suggested_rule_stub == "forbid" for d in deliveries):
            self.refused.set()
            await conn.execute("SET LOCAL ROLE spectral_projector")
            await conn.execute("SELECT count(*) FROM engine_effects")
        return await super().apply(conn, deliveries)


def _engine(
    settings: Settings,
    hook: EngineHook,
    *,
    idle: float | None = 2.0,
    sink: DeadLetterSink | None = None,
    handler: RecordingHandler | None = None,
) -> ConsumerEngine:
    assert settings.kafka_bootstrap is not None
    assert settings.database_url is not None
    return ConsumerEngine(
        handler or RecordingHandler(),
        settings,
        kafka_bootstrap=settings.kafka_bootstrap,
        database_url=settings.database_url.get_secret_value(),
        options=EngineOptions(stop_when_idle=idle, max_batch=BATCH, poll_timeout_ms=100),
        registry=CollectorRegistry(),
        hook=hook,
        dead_letter_sink=sink,
    )


async def _topic(
    settings: Settings, kafka_bootstrap: str, events: int, partitions: int = 1, **stubs: int
) -> tuple[str, dict[str, int]]:
    """The topic and its published keys; ``stubs``: the event at that index carries the stub."""
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await create_topics(kafka_bootstrap, [topic, dlq_topic(topic)], partitions=partitions)
    by_index = {index: stub for stub, index in stubs.items()}
    published = [cluster_event(stub=by_index.get(i)) for i in range(events)]
    offsets = await publish_envelopes(kafka_bootstrap, topic, published)
    return topic, {e.idempotency_key: o for e, o in zip(published, offsets, strict=True)}


def _group(settings: Settings) -> str:
    return settings.topic_prefix + "engine-test"


async def _exactly_once(database_url: str, keys: Collection[str]) -> None:
    effects = await _effects(database_url)
    assert set(effects) == set(keys)
    assert set(effects.values()) == {1}


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
async def test_a_revocation_while_a_committed_batch_awaits_its_offsets(
    settings: Settings, kafka_bootstrap: str, database_url: str, transport: str
) -> None:
    """Member A's first offset commit is held until a later batch of A committed in the
    database and a second member B joined: A's revocation starts while two committed batches
    wait for their acknowledgement. A must commit their offsets before it lets the partitions
    go, commit nothing for a partition it no longer owns, and drop what it fetched before;
    B reads from there: every record applied exactly once, the group's offsets at the end. On
    each transport: librdkafka runs its revocation inside the fetch, and the offsets are
    committed from inside it. With the classic cooperative protocol A rejoins once more after
    its revocation, and a batch of the partitions it keeps acknowledged meanwhile is refused
    (ILLEGAL_GENERATION): it must be committed once A has joined the new generation, or the
    group's offsets of A's partitions stay behind (its last records were in that batch)."""
    settings = settings.replace(**TRANSPORTS[transport])
    topic, keys = await _topic(settings, kafka_bootstrap, 16 * BATCH, partitions=4)
    group = Group()
    conn = await asyncpg.connect(database_url)
    first = Member(database_url, group, hold=lambda _offsets: True)
    second = Member(database_url, group)
    member_a = _engine(settings, first, idle=None)
    member_b = _engine(settings, second, idle=None)
    runs = [asyncio.create_task(member_a.run())]
    try:
        await asyncio.wait_for(first.holding.wait(), timeout=BOUND)
        # A later batch's transaction commits beside the held acknowledgement.
        assert await _until(lambda: _handled_more(conn, 2 * BATCH))
        runs.append(asyncio.create_task(member_b.run()))
        await asyncio.wait_for(first.revocation_started.wait(), timeout=BOUND)
        first.release.set()

        async def caught_up() -> bool:
            assert not any(run.done() for run in runs), runs
            ends = await end_offsets(kafka_bootstrap, topic)
            return await committed_offsets(kafka_bootstrap, _group(settings), topic) == ends

        await eventually(caught_up, timeout=60)
    finally:
        member_a.stop()
        member_b.stop()
        await asyncio.wait_for(asyncio.gather(*runs), timeout=60)
        await conn.close()

    assert first.revocations >= 1
    assert second.calls, "the joining member committed nothing"
    assert group.violations == []
    await _exactly_once(database_url, keys)


async def _handled_more(conn: asyncpg.Connection, than: int) -> bool:
    return await _handled(conn) >= than


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
async def test_a_graceful_stop_acknowledges_every_committed_batch(
    settings: Settings, kafka_bootstrap: str, database_url: str, transport: str
) -> None:
    """``stop()`` while batch N's offset commit is held and batch N+1 committed in the
    database behind it: the run returns normally with both acknowledged (the offset committed
    covers every record the database committed), then a second run finishes the topic."""
    settings = settings.replace(**TRANSPORTS[transport])
    topic, keys = await _topic(settings, kafka_bootstrap, 6 * BATCH)
    group = Group()
    hook = Member(database_url, group, hold=lambda _offsets: True)
    engine = _engine(settings, hook, idle=None)
    conn = await asyncpg.connect(database_url)
    run = asyncio.create_task(engine.run())
    try:
        await asyncio.wait_for(hook.holding.wait(), timeout=BOUND)
        assert await _until(lambda: _handled_more(conn, 2 * BATCH))
        engine.stop()
        await asyncio.sleep(0.5)  # the loop saw the stop; the acknowledgement is still held
        hook.release.set()
        await asyncio.wait_for(run, timeout=BOUND)
        handled = await _handled(conn)
    finally:
        await conn.close()
    committed = await committed_offsets(kafka_bootstrap, _group(settings), topic)
    assert committed == {0: handled}
    assert group.violations == []

    await _engine(settings, Member(database_url, group)).run()
    assert group.violations == []
    await _exactly_once(database_url, keys)
    assert await committed_offsets(kafka_bootstrap, _group(settings), topic) == await end_offsets(
        kafka_bootstrap, topic
    )


async def test_stop_when_idle_does_not_count_a_pending_offset_commit_as_idle(
    settings: Settings, kafka_bootstrap: str, database_url: str
) -> None:
    """The last batch's offset commit is held for three times ``stop_when_idle`` with nothing
    to fetch; then more records arrive. A batch being acknowledged is not idle time: the member
    is still consuming, applies them too, and ends with the offsets at the end of the topic."""
    idle = 1.0
    events = 3 * BATCH
    topic, keys = await _topic(settings, kafka_bootstrap, events)
    group = Group()
    hook = Member(database_url, group, hold=lambda offsets: events in offsets.values())
    engine = _engine(settings, hook, idle=idle)
    run = asyncio.create_task(engine.run())
    try:
        await asyncio.wait_for(hook.holding.wait(), timeout=BOUND)
        await asyncio.sleep(3 * idle)  # the time under test: longer than stop_when_idle
        later = [cluster_event() for _ in range(BATCH)]
        await publish_envelopes(kafka_bootstrap, topic, later)
    finally:
        hook.release.set()
    await asyncio.wait_for(run, timeout=BOUND)

    assert group.violations == []
    await _exactly_once(database_url, {*keys, *(e.idempotency_key for e in later)})
    assert await committed_offsets(kafka_bootstrap, _group(settings), topic) == {0: events + BATCH}


class FailingOnce(DeadLetterSink):
    """A dead-letter sink whose first batch fails (a permanent fault) once a later batch of the
    run committed in the database: the failing acknowledgement overlaps the next transaction."""

    def __init__(self, database_url: str, later: int) -> None:
        self.database_url = database_url
        self.later = later
        self.overlapped = False

    async def put(self, letters: Sequence[DeadLetter]) -> None:  # noqa: ARG002
        conn = await asyncpg.connect(self.database_url)
        try:
            self.overlapped = await _until(lambda: _handled_more(conn, self.later))
        finally:
            await conn.close()
        raise RuntimeError("dead-letter sink refused by the test")


async def test_a_failed_dead_letter_step_commits_no_later_offsets_and_loses_nothing(
    settings: Settings, kafka_bootstrap: str, database_url: str
) -> None:
    """Batch 2 holds a rejected record; its dead-letter step fails while batch 3 commits in the
    database. No offset past batch 1 is committed; the next run redelivers batches 2 and 3: the
    rejected record is dead-lettered (it was not kept as handled), batch 3 deduplicated."""
    rejected_at = BATCH + 5
    topic, keys = await _topic(settings, kafka_bootstrap, 6 * BATCH, reject=rejected_at)
    group = Group()
    group.dead_lettered = {(0, rejected_at)}
    hook = Member(database_url, group)
    # Every record up to a batch past the rejected one (which is not kept as handled).
    sink = FailingOnce(database_url, later=rejected_at + BATCH)

    with pytest.raises(RuntimeError, match="refused by the test"):
        await _engine(settings, hook, sink=sink).run()

    assert sink.overlapped, "the next transaction waited for the dead-letter step"
    # Nothing past the batch before the rejected record's (whatever the fetches' sizes).
    assert all(call[TopicPartition(topic, 0)] <= rejected_at for call in hook.calls)
    committed = await committed_offsets(kafka_bootstrap, _group(settings), topic)
    assert (committed[0] or 0) <= rejected_at

    await _engine(settings, Member(database_url, group)).run()
    assert group.violations == []
    rejected = {k for k, offset in keys.items() if offset == rejected_at}
    await _exactly_once(database_url, set(keys) - rejected)
    dead = await read_all(kafka_bootstrap, dlq_topic(topic))
    assert [(d.header("dlq.reason"), d.header("dlq.source.offset")) for d in dead] == [
        ("handler_rejected", str(rejected_at))
    ]
    assert await committed_offsets(kafka_bootstrap, _group(settings), topic) == await end_offsets(
        kafka_bootstrap, topic
    )


async def test_a_refused_privilege_beside_a_pending_acknowledgement_commits_nothing_after_it(
    settings: Settings, kafka_bootstrap: str, database_url: str
) -> None:
    """Batch N's offset commit is held until batch N+1's transaction met a privilege the
    database refuses (a ConfigurationError): N is still acknowledged (its offsets cover exactly
    what the database committed), nothing past N+1's first record is committed, and the run
    stops with the ConfigurationError."""
    forbidden_at = BATCH + 5
    topic, keys = await _topic(settings, kafka_bootstrap, 4 * BATCH, forbid=forbidden_at)
    group = Group()
    handler = RefusedHandler()
    hook = Member(database_url, group, hold=lambda _offsets: True)
    run = asyncio.create_task(_engine(settings, hook, handler=handler).run())
    await asyncio.wait_for(hook.holding.wait(), timeout=BOUND)
    await asyncio.wait_for(handler.refused.wait(), timeout=BOUND)
    hook.release.set()
    with pytest.raises(ConfigurationError, match="refused a privilege"):
        await asyncio.wait_for(run, timeout=BOUND)

    assert group.violations == []
    conn = await asyncpg.connect(database_url)
    try:
        handled = await _handled(conn)
    finally:
        await conn.close()
    assert 0 < handled <= forbidden_at
    assert await committed_offsets(kafka_bootstrap, _group(settings), topic) == {0: handled}
    assert len(await _effects(database_url)) == handled
    assert len(keys) == 4 * BATCH
