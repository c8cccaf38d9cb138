"""The record source contract (spectral.kafka.transport.RecordSource): what the engine relies on
from every transport. A concrete suite subclasses :class:`RecordSourceContract` and provides the
``world`` fixture: a :class:`SourceWorld` on its broker."""

from __future__ import annotations

import asyncio
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Collection, Sequence

from spectral.kafka.transport import (
    FetchOptions,
    FixedRange,
    Reading,
    Record,
    RecordSource,
    Subscription,
    TopicPartition,
)

Headers = tuple[tuple[str, bytes | None], ...]
BOUND = 60.0
"""Seconds any wait of the suite takes at most (a rebalance on a busy broker takes seconds)."""


class SourceWorld(ABC):
    """A broker to test sources on: fresh topics, records written by a producer the source did
    not write, and sources of the implementation under test."""

    @abstractmethod
    async def topic(self, partitions: int = 1) -> str:
        """A new, empty topic."""

    @abstractmethod
    async def produce(
        self,
        topic: str,
        partition: int,
        records: Sequence[tuple[bytes | None, bytes | None, Headers]],
    ) -> list[int]:
        """Write (key, value, headers) records to ``topic:partition`` in order; their offsets."""

    @abstractmethod
    def source(self, reading: Reading, options: FetchOptions) -> RecordSource:
        """A source of the implementation under test (not started)."""

    def group(self) -> str:
        return f"contract-{uuid.uuid4().hex[:10]}"


class Recorder:
    """A :class:`~spectral.kafka.transport.Rebalance` that records what it was told, in order."""

    def __init__(
        self, name: str = "", log: list[tuple[str, str, frozenset[TopicPartition]]] | None = None
    ) -> None:
        self.name = name
        self.log: list[tuple[str, str, frozenset[TopicPartition]]] = [] if log is None else log
        self.owned: set[TopicPartition] = set()
        self.joined = asyncio.Event()

    async def revoking(self, partitions: Collection[TopicPartition]) -> None:
        self.log.append((self.name, "revoking", frozenset(partitions)))
        await asyncio.sleep(0.05)  # the engine waits for its batches: the move must wait too
        self.owned -= set(partitions)
        self.log.append((self.name, "revoked", frozenset(partitions)))

    def assigned(self, partitions: Collection[TopicPartition]) -> None:
        self.log.append((self.name, "assigned", frozenset(partitions)))
        self.owned |= set(partitions)
        self.joined.set()


async def drain(source: RecordSource, count: int, *, bound: float = BOUND) -> list[Record]:
    """Fetch until ``count`` records came (or the bound passed)."""
    out: list[Record] = []
    deadline = time.monotonic() + bound
    while len(out) < count and time.monotonic() < deadline:
        out.extend(await source.fetch(200))
    return out


def records_of(n: int, tag: str = "") -> list[tuple[bytes | None, bytes | None, Headers]]:
    return [
        (f"k{i}".encode(), f"{tag}v{i}".encode(), (("event_type", b"t"), ("n", str(i).encode())))
        for i in range(n)
    ]


class RecordSourceContract:
    """Every record source passes these (``world``: a :class:`SourceWorld` fixture)."""

    async def test_a_member_reads_every_record_in_offset_order_with_its_bytes(
        self, world: SourceWorld
    ) -> None:
        topic = await world.topic()
        hostile: list[tuple[bytes | None, bytes | None, Headers]] = [
            (None, b"no key", ()),
            (b"\x00\xff binary key", None, (("null", None),)),
            (b"k", b"\xff\xfe not utf-8", (("dup", b"1"), ("dup", b"2"), ("", b""))),
        ]
        offsets = await world.produce(topic, 0, [*hostile, *records_of(5)])
        source = world.source(Subscription(world.group()), FetchOptions(max_records=100))
        rebalance = Recorder()
        await source.start([topic], rebalance)
        try:
            got = await drain(source, len(offsets))
        finally:
            await source.stop()
        assert [r.offset for r in got] == offsets
        assert {(r.topic, r.partition) for r in got} == {(topic, 0)}
        assert [(r.key, r.value, tuple(r.headers or ())) for r in got[:3]] == hostile
        assert ("", "assigned", frozenset({TopicPartition(topic, 0)})) in rebalance.log

    async def test_a_fetch_returns_at_most_max_records(self, world: SourceWorld) -> None:
        topic = await world.topic()
        await world.produce(topic, 0, records_of(25))
        source = world.source(Subscription(world.group()), FetchOptions(max_records=7))
        await source.start([topic], Recorder())
        try:
            sizes: list[int] = []
            deadline = time.monotonic() + BOUND
            while sum(sizes) < 25 and time.monotonic() < deadline:
                batch = await source.fetch(200)
                if batch:
                    sizes.append(len(batch))
        finally:
            await source.stop()
        assert sum(sizes) == 25
        assert max(sizes) <= 7

    async def test_a_commit_names_the_offset_after_each_partition_and_the_next_member_starts_there(
        self, world: SourceWorld
    ) -> None:
        topic = await world.topic(partitions=2)
        await world.produce(topic, 0, records_of(4))
        await world.produce(topic, 1, records_of(3))
        group = world.group()
        first = world.source(Subscription(group), FetchOptions(max_records=100))
        await first.start([topic], Recorder())
        try:
            got = await drain(first, 7)
            assert len(got) == 7
            kept = [r for r in got if not (r.partition == 0 and r.offset >= 2)]
            committed = await first.commit(kept)
            assert committed == {TopicPartition(topic, 0): 2, TopicPartition(topic, 1): 3}
            assert await first.committed(TopicPartition(topic, 0)) == 2
        finally:
            await first.stop()
        await world.produce(topic, 1, records_of(1, tag="later"))
        second = world.source(Subscription(group), FetchOptions(max_records=100))
        await second.start([topic], Recorder())
        try:
            again = await drain(second, 3)
            await asyncio.sleep(0.3)
            again.extend(await second.fetch(200))
        finally:
            await second.stop()
        assert sorted((r.partition, r.offset) for r in again) == [(0, 2), (0, 3), (1, 3)]

    async def test_a_commit_of_a_partition_the_member_does_not_own_commits_nothing(
        self, world: SourceWorld
    ) -> None:
        topic, other = await world.topic(), await world.topic()
        await world.produce(topic, 0, records_of(2))
        await world.produce(other, 0, records_of(2))
        reader = world.source(
            FixedRange({TopicPartition(other, 0): 0}, {TopicPartition(other, 0): 2}), FetchOptions()
        )
        await reader.start([other], Recorder())
        foreign = await drain(reader, 2)
        await reader.stop()
        group = world.group()
        member = world.source(Subscription(group), FetchOptions())
        await member.start([topic], Recorder())
        try:
            await drain(member, 2)
            assert await member.commit(foreign) == {}
            assert await member.committed(TopicPartition(other, 0)) is None
        finally:
            await member.stop()

    async def test_a_range_reads_exactly_its_offsets_commits_nothing_and_finishes(
        self, world: SourceWorld
    ) -> None:
        topic = await world.topic(partitions=2)
        await world.produce(topic, 0, records_of(6))
        await world.produce(topic, 1, records_of(2))
        p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
        source = world.source(FixedRange({p0: 2, p1: 1}, {p0: 5, p1: 1}), FetchOptions())
        assert not source.live
        assert source.group is None
        await source.start([topic], Recorder())
        try:
            got = await drain(source, 3)
            deadline = time.monotonic() + BOUND
            while not await source.finished() and time.monotonic() < deadline:
                got.extend(await source.fetch(100))
            assert await source.finished()
            assert await source.commit(got) == {}
            assert await source.committed(p0) is None
        finally:
            await source.stop()
        assert sorted((r.partition, r.offset) for r in got) == [(0, 2), (0, 3), (0, 4)]

    async def test_offsets_of_partitions(self, world: SourceWorld) -> None:
        topic = await world.topic()
        await world.produce(topic, 0, records_of(3))
        tp = TopicPartition(topic, 0)
        source = world.source(Subscription(world.group()), FetchOptions())
        await source.start([topic], Recorder())
        try:
            await drain(source, 3)
            assert await source.end_offsets([tp]) == {tp: 3}
            assert await source.beginning_offsets([tp]) == {tp: 0}
            assert await source.committed(tp) is None
            assert source.assignment() == frozenset({tp})
            await source.probe()
        finally:
            await source.stop()
        assert source.assignment() == frozenset()

    async def test_latest_starts_a_new_group_at_the_end(self, world: SourceWorld) -> None:
        topic = await world.topic()
        await world.produce(topic, 0, records_of(3))
        source = world.source(Subscription(world.group(), "latest"), FetchOptions())
        rebalance = Recorder()
        await source.start([topic], rebalance)
        try:
            deadline = time.monotonic() + BOUND
            early: list[Record] = []
            while not rebalance.joined.is_set() and time.monotonic() < deadline:
                early.extend(await source.fetch(200))
            early.extend(await source.fetch(500))
            await world.produce(topic, 0, records_of(1, tag="new"))
            got = [*early, *await drain(source, 1)]
        finally:
            await source.stop()
        assert [r.offset for r in got] == [3]

    async def test_stop_is_safe_before_start_and_twice(self, world: SourceWorld) -> None:
        topic = await world.topic()
        never = world.source(Subscription(world.group()), FetchOptions())
        await never.stop()
        source = world.source(Subscription(world.group()), FetchOptions())
        await source.start([topic], Recorder())
        await source.start([topic], Recorder())  # a second start does nothing
        await source.stop()
        await source.stop()

    async def test_a_member_joining_takes_partitions_only_after_their_owner_let_them_go(
        self, world: SourceWorld
    ) -> None:
        topic = await world.topic(partitions=4)
        for partition in range(4):
            await world.produce(topic, partition, records_of(3))
        group = world.group()
        log: list[tuple[str, str, frozenset[TopicPartition]]] = []
        a_said, b_said = Recorder("a", log), Recorder("b", log)
        a = world.source(Subscription(group), FetchOptions())
        b = world.source(Subscription(group), FetchOptions())
        stop = asyncio.Event()
        fetched: dict[str, list[Record]] = {"a": [], "b": []}

        async def loop(name: str, source: RecordSource, said: Recorder) -> None:
            while not stop.is_set():
                batch = await source.fetch(100)
                # Nothing of a partition the member does not own comes out of a fetch.
                assert all(TopicPartition(r.topic, r.partition) in said.owned for r in batch)
                fetched[name].extend(batch)

        await a.start([topic], a_said)
        running = [asyncio.create_task(loop("a", a, a_said))]
        try:
            await asyncio.wait_for(a_said.joined.wait(), BOUND)
            await asyncio.sleep(0.5)
            await b.start([topic], b_said)
            running.append(asyncio.create_task(loop("b", b, b_said)))
            deadline = time.monotonic() + BOUND
            while time.monotonic() < deadline and not (a_said.owned and b_said.owned):
                await asyncio.sleep(0.1)
                for task in running:
                    if task.done():
                        task.result()
            assert a_said.owned, log
            assert b_said.owned, log
            assert not a_said.owned & b_said.owned
            assert a_said.owned | b_said.owned == {TopicPartition(topic, p) for p in range(4)}
        finally:
            stop.set()
            await asyncio.gather(*running, return_exceptions=False)
            await a.stop()
            await b.stop()
        # Every partition b got was let go by a first (a revocation ends before the assignment).
        for index, (who, what, partitions) in enumerate(log):
            if who == "b" and what == "assigned":
                for tp in partitions:
                    released = [
                        i
                        for i, (w, kind, ps) in enumerate(log[:index])
                        if w == "a" and kind == "revoked" and tp in ps
                    ]
                    assert released, (tp, log)
