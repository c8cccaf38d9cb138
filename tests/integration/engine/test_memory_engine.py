"""The consumer engine on the in-memory transport (spectral.kafka.memory) and the real
PostgreSQL: the pipeline's order rules through the engine's public ``run`` (no private step is
driven), members joining, leaving and crashing with an incremental rebalance, and a property
test over batch sizes, partitions and crash points — every record applied exactly once, the
group's offsets at the end."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from contracts import FAILURE_CLUSTER_DETECTED
from spectral.engine.dead_letters import DeadLetterSink
from spectral.engine.engine import ConsumerEngine, EngineOptions
from spectral.engine.handler import Delivery, HandlerResult, Outcome
from spectral.errors import ConfigurationError
from spectral.kafka.dlq import DeadLetter
from spectral.kafka.memory import MemoryBroker, MemorySource, MemoryTransport
from spectral.kafka.topics import topic_for
from spectral.kafka.transport import FetchOptions, Reading, Record, RecordSource, TopicPartition
from spectral.observability.progress import EngineHook
from spectral.settings import Settings, load_settings
from tests.events import encode, record_key
from tests.integration.engine.test_engine import (  # the same handler and effects table
    RecordingHandler,
    _effects,
    effects_table,  # noqa: F401 - a fixture
)
from tests.kafka_support import cluster_event

pytestmark = pytest.mark.integration

GROUP = "memory-engine"


def _topic(settings: Settings) -> str:
    return topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)


def _publish(broker: MemoryBroker, topic: str, count: int, **stubs: int) -> list[str]:
    """``count`` events (the one at index ``stubs[stub]`` carries that stub); their keys."""
    by_index = {index: stub for stub, index in stubs.items()}
    keys = []
    for index in range(count):
        event = cluster_event(stub=by_index.get(index))
        broker.append(topic, encode(event), key=record_key(event))
        keys.append(event.idempotency_key)
    return keys


def _engine(
    settings: Settings,
    broker: MemoryBroker,
    database_url: str,
    *,
    max_batch: int = 10,
    batch_growth: int = 1,
    idle: float | None = 0.5,
    sink: DeadLetterSink | None = None,
    handler: RecordingHandler | None = None,
    transport: MemoryTransport | None = None,
    commit_interval: float = 0.0,
    hook: EngineHook | None = None,
) -> ConsumerEngine:
    return ConsumerEngine(
        handler or RecordingHandler(),
        settings,
        transport=transport or MemoryTransport(broker),
        database_url=database_url,
        options=EngineOptions(
            group=GROUP,
            max_batch=max_batch,
            batch_growth=batch_growth,
            stop_when_idle=idle,
            poll_timeout_ms=20,
            commit_interval=commit_interval,
        ),
        registry=CollectorRegistry(),
        dead_letter_sink=sink,
        hook=hook,
    )


async def _exactly_once(database_url: str, keys: Sequence[str]) -> None:
    effects = await _effects(database_url)
    assert set(effects) == set(keys)
    assert set(effects.values()) == {1}


def _at_end(broker: MemoryBroker, topic: str) -> bool:
    ends = {
        TopicPartition(topic, p): broker.end_offset(TopicPartition(topic, p))
        for p in range(broker.partitions(topic))
    }
    return broker.committed(GROUP) == {tp: end for tp, end in ends.items() if end}


class RefusedHandler(RecordingHandler):
    """A delivery whose stub is "forbid" runs as a role the database refuses (the deployment's
    configuration, not the record's): the engine stops with a ConfigurationError."""

    async def apply(
        self, conn: asyncpg.Connection, deliveries: Sequence[Delivery]
    ) -> HandlerResult[None]:
        if any(d.envelope.payload.suggested_rule_stub == "forbid" for d in deliveries):
            await conn.execute("SET LOCAL ROLE spectral_projector")
            await conn.execute("SELECT count(*) FROM engine_effects")
        return await super().apply(conn, deliveries)


class FailingSink(DeadLetterSink):
    """Refuses every dead letter for good (a permanent fault of the sink)."""

    async def put(self, letters: Sequence[DeadLetter]) -> None:  # noqa: ARG002
        raise RuntimeError("dead-letter sink refused by the test")


@pytest.mark.usefixtures("effects_table")
async def test_nothing_after_a_failed_transaction_is_applied_or_committed(
    settings: Settings, database_url: str
) -> None:
    broker, topic = MemoryBroker(), _topic(settings)
    _publish(broker, topic, 60, forbid=25)
    with pytest.raises(ConfigurationError, match="refused a privilege"):
        await _engine(settings, broker, database_url, handler=RefusedHandler()).run()
    effects = await _effects(database_url)
    committed = broker.committed(GROUP).get(TopicPartition(topic, 0), 0)
    assert committed <= 20  # the batch of the refused record and those after it: not committed
    assert len(effects) <= 20  # nor applied (the batches behind it never started)
    assert committed == len(effects)


@pytest.mark.usefixtures("effects_table")
async def test_after_a_failed_dead_letter_step_no_later_offset_moves_and_a_rerun_loses_nothing(
    settings: Settings, database_url: str
) -> None:
    broker, topic = MemoryBroker(), _topic(settings)
    keys = _publish(broker, topic, 60, reject=25)
    with pytest.raises(RuntimeError, match="refused by the test"):
        await _engine(settings, broker, database_url, sink=FailingSink()).run()
    assert broker.committed(GROUP).get(TopicPartition(topic, 0), 0) <= 20

    summary = await _engine(settings, broker, database_url).run()
    rejected = keys[25]
    await _exactly_once(database_url, [k for k in keys if k != rejected])
    assert summary.counts[Outcome.DEAD_LETTERED] == 1
    [letter] = broker.records(topic + ".dlq")
    assert dict(letter.headers)["dlq.source.offset"] == b"25"
    assert _at_end(broker, topic)


@pytest.mark.usefixtures("effects_table")
@pytest.mark.parametrize("commit_interval", [0.0, 30.0], ids=["each-batch", "pending"])
async def test_a_member_joining_and_leaving_moves_only_some_partitions_and_loses_nothing(
    settings: Settings, database_url: str, commit_interval: float
) -> None:
    """The in-memory group rebalances incrementally: when b joins, a keeps the partitions it
    is not asked to give, and the records a fetched of the moved ones are dropped, not lost.
    Each member commits what it applied of a partition before the partition leaves it — with
    offsets pending (``commit_interval`` longer than the run) at the revocation and at the
    stop — so the next owner starts past it: nothing is read twice."""
    broker, topic = MemoryBroker(), _topic(settings)
    broker.create_topic(topic, 4)
    keys = _publish(broker, topic, 400)
    a = _engine(
        settings, broker, database_url, idle=None, max_batch=5, commit_interval=commit_interval
    )
    b = _engine(
        settings, broker, database_url, idle=None, max_batch=5, commit_interval=commit_interval
    )
    runs = [asyncio.create_task(a.run())]
    await asyncio.sleep(0.3)
    runs.append(asyncio.create_task(b.run()))
    await asyncio.sleep(0.3)
    a.stop()  # leaves: b takes everything
    await asyncio.wait_for(runs[0], 30)
    keys += _publish(broker, topic, 40)
    deadline = asyncio.get_running_loop().time() + 30
    while not _at_end(broker, topic) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.1)
    b.stop()
    await asyncio.wait_for(runs[1], 30)
    await _exactly_once(database_url, keys)
    assert _at_end(broker, topic)
    assert [run.result().counts[Outcome.DEDUPLICATED] for run in runs] == [0, 0]


@dataclass(frozen=True)
class Scenario:
    partitions: int
    events: int
    max_batch: int
    crashes: list[float]
    """Seconds each round of members runs before it is cancelled (a crash)."""
    members: int
    batch_growth: int = 1
    short_fetches: bool = False
    """Each fetch hands over fewer records than it may (:class:`ShortFetches`)."""
    commit_interval: float = 0.0


@settings(max_examples=12, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.builds(
        Scenario,
        partitions=st.integers(1, 4),
        events=st.integers(1, 120),
        max_batch=st.integers(1, 50),
        crashes=st.lists(st.floats(0.0, 0.3), max_size=3),
        members=st.integers(1, 3),
        batch_growth=st.integers(1, 4),
        short_fetches=st.booleans(),
        commit_interval=st.sampled_from([0.0, 0.05, 30.0]),
    )
)
def test_any_batching_and_any_crash_apply_every_record_exactly_once(
    database_url: str, scenario: Scenario
) -> None:
    """Members crash (their runs cancelled mid-batch) at random moments, others run beside
    them, their batches growing with the backlog or not, their fetches full or short, their
    offsets committed after each batch or pending for a while; a last member runs until idle:
    each record applied once, the offsets at the end."""
    asyncio.run(_crashing_runs(database_url, scenario))


async def _crashing_runs(database_url: str, scenario: Scenario) -> None:
    settings = load_settings(topic_prefix=f"p{scenario.partitions}x{scenario.events}.")
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "DROP TABLE IF EXISTS engine_effects; "
            "CREATE TABLE engine_effects (idempotency_key text NOT NULL, part int, off bigint); "
            "DELETE FROM core.event_handled"
        )
    finally:
        await conn.close()
    broker, topic = MemoryBroker(), _topic(settings)
    broker.create_topic(topic, scenario.partitions)
    keys = _publish(broker, topic, scenario.events)

    def member(idle: float | None = 0.5) -> ConsumerEngine:
        transport = ShortFetches(broker) if scenario.short_fetches else None
        return _engine(
            settings,
            broker,
            database_url,
            max_batch=scenario.max_batch,
            batch_growth=scenario.batch_growth,
            idle=idle,
            transport=transport,
            commit_interval=scenario.commit_interval,
        )

    for after in scenario.crashes:
        runs = [asyncio.create_task(member().run()) for _ in range(scenario.members)]
        await asyncio.sleep(after)
        for run in runs:
            run.cancel()  # a crash: whatever was in flight is abandoned
        await asyncio.gather(*runs, return_exceptions=True)
    await member(idle=0.3).run()
    await _exactly_once(database_url, keys)
    assert _at_end(broker, topic)


class SizingHandler(RecordingHandler):
    """Records how many deliveries each batch handed it, and in which order per partition."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.offsets: dict[int, list[int]] = {}

    async def apply(
        self, conn: asyncpg.Connection, deliveries: Sequence[Delivery]
    ) -> HandlerResult[None]:
        self.sizes.append(len(deliveries))
        for d in deliveries:
            self.offsets.setdefault(d.partition, []).append(d.offset)
        return await super().apply(conn, deliveries)


@pytest.mark.usefixtures("effects_table")
async def test_a_backlog_grows_the_batches_to_their_bound_and_keeps_the_order(
    settings: Settings, database_url: str
) -> None:
    """A backlog of 400 records, 10 a fetch, ``batch_growth`` 4: batches grow (20, then 40 =
    4 x 10, never more), each partition's records still arrive in offset order, each applied
    once."""
    broker, topic = MemoryBroker(), _topic(settings)
    keys = _publish(broker, topic, 400)
    handler = SizingHandler()
    engine = _engine(settings, broker, database_url, handler=handler, batch_growth=4)
    summary = await engine.run()
    await _exactly_once(database_url, keys)
    assert _at_end(broker, topic)
    assert max(handler.sizes) == 40
    assert summary.batches < 400 // 10 // 2
    assert all(offsets == sorted(offsets) for offsets in handler.offsets.values())


class ShortFetches(MemoryTransport):
    """A client that returns fewer records than it may (a real one returns what its completed
    fetch responses hold, often less than ``max_records`` with thousands more arriving): each
    fetch hands over at most 7 of its 10 and keeps the rest for the next."""

    def source(self, reading: Reading, options: FetchOptions) -> RecordSource:
        return _ShortSource(self.broker, reading, options)


class _ShortSource(MemorySource):
    def __init__(self, broker: MemoryBroker, reading: Reading, options: FetchOptions) -> None:
        super().__init__(broker, reading, options)
        self._held: list[Record] = []

    async def fetch(self, timeout_ms: int) -> Sequence[Record]:
        if len(self._held) < 7:
            self._held += await super().fetch(timeout_ms if not self._held else 0)
        out, self._held = self._held[:7], self._held[7:]
        return out


@pytest.mark.usefixtures("effects_table")
async def test_a_backlog_grows_the_batches_though_no_fetch_comes_back_full(
    settings: Settings, database_url: str
) -> None:
    """The backlog is told by what the client holds, not by a full first fetch: with every
    fetch short (7 of 10), ``batch_growth`` 4 still grows the batches to 40, in order, each
    record applied once."""
    broker, topic = MemoryBroker(), _topic(settings)
    keys = _publish(broker, topic, 400)
    handler = SizingHandler()
    short = ShortFetches(broker)
    engine = _engine(
        settings, broker, database_url, handler=handler, batch_growth=4, transport=short
    )
    summary = await engine.run()
    await _exactly_once(database_url, keys)
    assert 40 <= max(handler.sizes) < 40 + 7  # the target, overshot by at most one fetch
    assert summary.batches < 400 // 10 // 2
    assert all(offsets == sorted(offsets) for offsets in handler.offsets.values())


class RevokesWhileGathering(MemoryTransport):
    """A group that moves partition 0 away from its member (to no one) at the first fetch that
    does not wait — inside a growing batch, after its first fetch took records of partition 0."""

    def source(self, reading: Reading, options: FetchOptions) -> RecordSource:
        self.made = _RevokingSource(self.broker, reading, options)
        return self.made


class _RevokingSource(MemorySource):
    gone = False
    """Partition 0 has been revoked (the engine told, its epoch moved on)."""

    async def fetch(self, timeout_ms: int) -> Sequence[Record]:
        revoking = timeout_ms == 0 and not self.gone
        if revoking:
            self.target = {tp for tp in self.target if tp.partition != 0}
        records = await super().fetch(timeout_ms)  # gives partition 0 up first (_follow)
        self.gone = self.gone or revoking
        return records


class WatchingHandler(RecordingHandler):
    """Records each applied delivery's partition and whether partition 0 was gone by then."""

    def __init__(self, transport: RevokesWhileGathering) -> None:
        self.transport = transport
        self.applied: list[tuple[int, bool]] = []

    async def apply(
        self, conn: asyncpg.Connection, deliveries: Sequence[Delivery]
    ) -> HandlerResult[None]:
        gone = self.transport.made.gone
        self.applied += [(d.partition, gone) for d in deliveries]
        return await super().apply(conn, deliveries)


@pytest.mark.usefixtures("effects_table")
@pytest.mark.parametrize("commit_interval", [0.0, 30.0], ids=["each-batch", "pending"])
async def test_a_partition_revoked_while_a_batch_grows_leaves_the_batch(
    settings: Settings, database_url: str, commit_interval: float
) -> None:
    """Partition 0 is revoked between two fetches of one growing batch: the records its first
    fetch took of partition 0 are dropped from the batch — never applied by a member that no
    longer owns them, their offsets not committed (its next owner reads them) — and every
    other partition's records are applied once. With offsets pending (``commit_interval``
    longer than the run) the revocation commits those of what was applied, before the
    partition leaves."""
    broker, topic = MemoryBroker(), _topic(settings)
    broker.create_topic(topic, 3)
    keys = _publish(broker, topic, 90)
    transport = RevokesWhileGathering(broker)
    handler = WatchingHandler(transport)
    engine = _engine(
        settings,
        broker,
        database_url,
        handler=handler,
        batch_growth=4,
        transport=transport,
        commit_interval=commit_interval,
    )
    await engine.run()
    assert transport.made.gone
    late = [partition for partition, gone in handler.applied if gone and partition == 0]
    assert not late, f"{len(late)} records of partition 0 applied after it was revoked"
    applied_of_0 = sum(1 for partition, _ in handler.applied if partition == 0)
    first = TopicPartition(topic, 0)
    assert broker.committed(GROUP).get(first, 0) == applied_of_0  # none skipped unapplied
    others = {p: broker.end_offset(TopicPartition(topic, p)) for p in (1, 2)}
    assert {tp.partition: o for tp, o in broker.committed(GROUP).items() if tp != first} == {
        p: end for p, end in others.items() if end
    }
    effects = await _effects(database_url)
    assert set(effects.values()) == {1}  # once each
    assert len(effects) == len(keys) - (broker.end_offset(first) - applied_of_0)


@pytest.mark.usefixtures("effects_table")
async def test_by_default_a_batch_is_one_fetch_however_long_the_backlog(
    settings: Settings, database_url: str
) -> None:
    """``batch_growth`` 1 (the default): a backlog of 400 records, 10 a fetch, is applied in
    batches of 10, in order, each record once."""
    broker, topic = MemoryBroker(), _topic(settings)
    keys = _publish(broker, topic, 400)
    handler = SizingHandler()
    options = EngineOptions()
    assert options.batch_growth == 1
    await _engine(settings, broker, database_url, handler=handler).run()
    await _exactly_once(database_url, keys)
    assert max(handler.sizes) == 10
    assert all(offsets == sorted(offsets) for offsets in handler.offsets.values())


@pytest.mark.usefixtures("effects_table")
async def test_a_consumer_that_keeps_up_applies_what_arrived_at_once(
    settings: Settings, database_url: str
) -> None:
    """Records arriving one at a time while the consumer keeps up: every batch is what one fetch
    found (no waiting for more), so freshness does not pay for the growth."""
    broker, topic = MemoryBroker(), _topic(settings)
    handler = SizingHandler()
    engine = _engine(settings, broker, database_url, handler=handler, idle=1.0, batch_growth=4)
    running = asyncio.create_task(engine.run())
    keys: list[str] = []
    for _ in range(15):
        keys += _publish(broker, topic, 1)
        await asyncio.sleep(0.1)
    await running
    await _exactly_once(database_url, keys)
    assert max(handler.sizes) <= 2


class CountingCommits(EngineHook):
    def __init__(self) -> None:
        self.commits: list[dict[TopicPartition, int]] = []

    def committed(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.commits.append(dict(offsets))


@pytest.mark.usefixtures("effects_table")
async def test_offsets_pending_for_the_commit_interval_are_committed_when_the_run_stops(
    settings: Settings, database_url: str
) -> None:
    """``commit_interval`` longer than the run: nine batches and more, one offset commit (at
    the stop), the group's offsets at the end of every partition, every record applied once."""
    broker, topic = MemoryBroker(), _topic(settings)
    broker.create_topic(topic, 3)
    keys = _publish(broker, topic, 120)
    hook = CountingCommits()
    summary = await _engine(settings, broker, database_url, commit_interval=30.0, hook=hook).run()
    await _exactly_once(database_url, keys)
    assert summary.batches >= 9
    assert len(hook.commits) == 1
    ends = {TopicPartition(topic, p): broker.end_offset(TopicPartition(topic, p)) for p in range(3)}
    assert broker.committed(GROUP) == ends
    assert hook.commits[0] == ends


@pytest.mark.usefixtures("effects_table")
async def test_a_consumer_waiting_idle_commits_what_is_pending_once_the_interval_passed(
    settings: Settings, database_url: str
) -> None:
    """Nothing more arrives and the consumer keeps running: what was applied is committed
    within the interval (and a poll), not only when it stops — fewer commits than batches."""
    broker, topic = MemoryBroker(), _topic(settings)
    broker.create_topic(topic, 3)
    keys = _publish(broker, topic, 120)
    hook = CountingCommits()
    engine = _engine(settings, broker, database_url, idle=None, commit_interval=0.3, hook=hook)
    run = asyncio.create_task(engine.run())
    ends = {TopicPartition(topic, p): broker.end_offset(TopicPartition(topic, p)) for p in range(3)}
    try:
        async with asyncio.timeout(10):
            while broker.committed(GROUP) != ends:
                assert not run.done(), run
                await asyncio.sleep(0.05)
        committed_while_running = len(hook.commits)
    finally:
        engine.stop()
        summary = await run
    await _exactly_once(database_url, keys)
    assert 1 <= committed_while_running < summary.batches
