"""Rebalances measured on the 3-broker cluster under load, per transport and group protocol.

A steady load of failure-cluster snapshots (``RATE`` a second, ``CLUSTERS`` keys, each snapshot
numbered by its ``failure_count``) is produced straight into a topic of ``PARTITIONS``
partitions (replication 3, ``min.insync.replicas`` 2), and read by ``spectral consume
rule-candidates`` processes, members of one consumer group. A sampler reads the projection every
``SAMPLE`` seconds: a partition progresses when the snapshot number of one of its clusters grows
(the effect committed in PostgreSQL, not a fetch). Then, one after the other:

* **join**: a third member starts;
* **leave**: that member stops gracefully (SIGTERM: it commits and leaves the group);
* **SIGKILL**: a member is killed (its partitions wait for its session to expire); a new member
  then takes its place (not measured);
* **coordinator frozen**: the broker coordinating the group is SIGSTOPped for ``FREEZE`` seconds
  (past the brokers' 4 s and the group's 10 s sessions), then SIGCONTed;
* **rolling restart**: each broker is stopped (SIGTERM) and started again, one after the other,
  each time until every replica is back in sync.

For each, from the fault until the group is settled again with every partition progressing
(plus ``AFTER`` seconds):

* **moved**: the partitions whose owner differs before and after (the members log what they are
  assigned, revoked and lose, on every transport);
* **unmoved revoked / away**: how many of the partitions that kept their owner the protocol
  revoked and gave back meanwhile (an eager rebalance revokes every partition), and the
  longest time one was away — the stall the protocol imposes, read from the members' logs,
  whatever pauses a busy machine adds;
* **stall of unmoved / moved**: the longest time without progress of any one partition that did
  not move / that moved;
* **total stall**: the longest time in which no partition progressed at all;
* **redelivered**: records delivered again, deduplicated by the members (``deduplicated``).

At the end the load stops, everything offered must be applied and every member exit 0 on
SIGTERM: **lost** counts snapshots without a dedup row and clusters whose projection is not the
newest snapshot, **applied twice** dedup rows beyond one per snapshot (both must be 0).

Runs as ``tests/cluster/test_rebalance.py`` (``make test-cluster``); each transport prints its
table.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import socket
import time
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from subprocess import Popen
from typing import Any
from uuid import UUID

import asyncpg
from aiokafka import AIOKafkaProducer

from contracts import FAILURE_CLUSTER_DETECTED
from spectral.devstack.kafka_cluster import LocalKafkaCluster
from spectral.kafka.topics import dlq_topic, group_for, topic_for
from spectral.settings import Settings
from tests.cluster.support import (
    BROKERS,
    coordinator_of,
    in_sync,
    kill_all,
    start_spectral,
    tail,
    terminate,
    wait_exit,
)
from tests.events import encode
from tests.integration.outbox.relay.support import key_id, numbered
from tests.kafka_support import read_all, transport_env

PARTITIONS = 6
CLUSTERS = 60
PER_TICK = 6
TICK = 0.1
RATE = PER_TICK / TICK
SAMPLE = 0.1
AFTER = 3.0
"""Seconds observed once the group is stable again and every partition progressed."""
BASELINE = 3.0
FREEZE = 20.0
SETTLE_TIMEOUT = 120.0
CONSUMER = "rule-candidates"


@dataclass(frozen=True)
class Measured:
    """One fault, measured."""

    fault: str
    members: str
    moved: int
    unmoved_revoked: int
    """Partitions that did not move but were revoked and given back (an eager rebalance)."""
    unmoved_away: float
    """The longest such absence (seconds, from the members' logs)."""
    unmoved_stall: float
    moved_stall: float
    total_stall: float
    settled_after: float
    redelivered: int


@dataclass
class Member:
    name: str
    process: Popen[bytes]
    port: int
    log: Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_DEDUPLICATED = re.compile(
    r'^spectral_consumer_events_total\{consumer="rule-candidates",outcome="deduplicated"\} (\S+)$',
    re.MULTILINE,
)


def _deduplicated(port: int) -> int:
    """The member's ``deduplicated`` count (its /metrics); 0 when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            text = answer.read().decode()
    except OSError:
        return 0
    found = _DEDUPLICATED.search(text)
    return int(float(found.group(1))) if found else 0


@dataclass
class RebalanceLine:
    """The load, the members and the sampled progress of one transport (see the module)."""

    settings: Settings
    env: dict[str, str]
    admin: asyncpg.Pool
    cluster: LocalKafkaCluster
    logs_dir: Path
    members: list[Member] = field(default_factory=list)
    last_seq: dict[UUID, int] = field(default_factory=dict)
    keys: set[str] = field(default_factory=set)
    partition_of: dict[UUID, int] = field(default_factory=dict)
    samples: list[tuple[float, tuple[int, ...]]] = field(default_factory=list)
    _stop_load: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _started: int = 0

    @property
    def bootstrap(self) -> str:
        assert self.settings.kafka_bootstrap is not None
        return self.settings.kafka_bootstrap

    @property
    def topic(self) -> str:
        return topic_for(FAILURE_CLUSTER_DETECTED, self.settings.topic_prefix)

    @property
    def group(self) -> str:
        return group_for(CONSUMER, self.settings.topic_prefix)

    # -- load and sampling ----------------------------------------------------------------

    async def _produce(self) -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, acks="all", enable_idempotence=True, linger_ms=5
        )
        await producer.start()
        try:
            ring = itertools.cycle(range(CLUSTERS))
            while not self._stop_load.is_set():
                began = time.monotonic()
                batch = []
                for _ in range(PER_TICK):
                    key = key_id(next(ring))
                    seq = self.last_seq.get(key, 0) + 1
                    batch.append((key, seq, numbered(key, seq)))
                    self.last_seq[key] = seq
                await asyncio.gather(*(self._send(producer, *one) for one in batch))
                await asyncio.sleep(max(0.0, TICK - (time.monotonic() - began)))
        finally:
            await producer.stop()

    async def _send(self, producer: AIOKafkaProducer, key: UUID, seq: int, envelope: Any) -> None:
        """Send until acknowledged: a snapshot sent twice is one idempotency key."""
        self.keys.add(envelope.idempotency_key)
        while True:
            try:
                meta = await producer.send_and_wait(
                    self.topic, value=encode(envelope), key=str(key).encode()
                )
            except Exception:  # noqa: BLE001 - a broker fault under test: send it again
                await asyncio.sleep(0.2)
                continue
            self.partition_of[key] = meta.partition
            return
        del seq

    async def _sample(self) -> None:
        async with self.admin.acquire() as conn:
            while True:
                rows = await conn.fetch(
                    "SELECT cluster_id, failure_count FROM platform.rule_candidates_pending"
                )
                per = [0] * PARTITIONS
                for row in rows:
                    partition = self.partition_of.get(row["cluster_id"])
                    if partition is not None:
                        per[partition] += int(row["failure_count"])
                self.samples.append((time.monotonic(), tuple(per)))
                await asyncio.sleep(SAMPLE)

    def start_load(self) -> None:
        self._tasks = [
            asyncio.create_task(self._produce()),
            asyncio.create_task(self._sample()),
        ]

    def _check(self) -> None:
        for task in self._tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise AssertionError("the load or the sampler failed") from task.exception()
        for member in self.members:
            assert member.process.poll() is None, (
                f"{member.name} exited {member.process.returncode}:\n{tail(member.log)}"
            )

    # -- members and the group ------------------------------------------------------------

    def add_member(self) -> Member:
        self._started += 1
        name = f"member-{self._started}"
        port = _free_port()
        log = self.logs_dir / f"{name}.log"
        process = start_spectral(self.env, log, "consume", CONSUMER, "--metrics-port", str(port))
        member = Member(name, process, port, log)
        self.members.append(member)
        return member

    def _moves(self, member: Member) -> list[tuple[float, str, set[int]]]:
        """What ``member`` logged of its partitions: (wall-clock time, ``assigned`` |
        ``revoked``, partitions), in order (``lost`` counts as revoked)."""
        out: list[tuple[float, str, set[int]]] = []
        for line in member.log.read_text(errors="replace").splitlines():
            if '"partitions' not in line or not line.startswith("{"):
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line being written
            event = str(entry.get("event", ""))
            if event == "partitions assigned":
                kind = "assigned"
            elif event.startswith(("partitions revoked", "partitions lost")):
                kind = "revoked"
            else:
                continue
            named = {
                int(name.rsplit(":", 1)[1])
                for name in entry.get("partitions", [])
                if name.rsplit(":", 1)[0] == self.topic
            }
            at = datetime.fromisoformat(str(entry["timestamp"])).timestamp()
            out.append((at, kind, named))
        return out

    async def assignment(self) -> dict[str, frozenset[int]] | None:
        """Member -> the partitions it holds, as the live members log them (``partitions
        assigned`` / ``revoked`` / ``lost``, on every transport); None while the group is not
        settled (a partition held by none or by two, a member holding none)."""
        owned: dict[str, frozenset[int]] = {}
        for member in self.members:
            held: set[int] = set()
            for _, kind, named in self._moves(member):
                held = held | named if kind == "assigned" else held - named
            owned[member.name] = frozenset(held)
        every = [p for parts in owned.values() for p in parts]
        if sorted(every) != list(range(PARTITIONS)) or not all(owned.values()):
            return None
        return owned

    def revoked_while_kept(
        self, owners: dict[int, str], since: float, until: float
    ) -> tuple[int, float]:
        """Of the partitions that stayed with their owner (``owners``), how many the protocol
        took away meanwhile (revoked, then given back), and the longest time one was away —
        the stall the protocol itself imposes, whatever the machine's pauses (wall clock)."""
        taken: set[int] = set()
        longest = 0.0
        by_name = {m.name: m for m in self.members}
        for partition, name in owners.items():
            away_since: float | None = None
            for at, kind, named in self._moves(by_name[name]):
                if partition not in named or not since <= at <= until:
                    continue
                if kind == "revoked":
                    away_since = at
                    taken.add(partition)
                elif away_since is not None:
                    longest = max(longest, at - away_since)
                    away_since = None
            if away_since is not None:
                longest = max(longest, until - away_since)
        return len(taken), round(longest, 2)

    async def settled(self, members: int, since: float) -> dict[str, frozenset[int]]:
        """Wait until the group holds ``members`` members owning every partition once and every
        partition progressed after ``since``; its assignment."""
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while True:
            self._check()
            owned = await self.assignment()
            if (
                owned is not None
                and len(owned) == members
                and self.progressed_since(since) == set(range(PARTITIONS))
            ):
                return owned
            assert time.monotonic() < deadline, (
                f"not settled after {SETTLE_TIMEOUT}s: {owned}, "
                f"progressed {sorted(self.progressed_since(since))}"
            )
            await asyncio.sleep(0.2)

    def progressed_since(self, since: float) -> set[int]:
        before = [s for t, s in self.samples if t <= since]
        base = before[-1] if before else (0,) * PARTITIONS
        latest = self.samples[-1][1] if self.samples else base
        return {p for p in range(PARTITIONS) if latest[p] > base[p]}

    # -- stall ----------------------------------------------------------------------------

    def _moments(self, partitions: set[int], since: float, until: float) -> list[float]:
        moments = [since]
        previous: tuple[int, ...] | None = None
        for t, values in self.samples:
            if (
                previous is not None
                and since < t <= until
                and any(values[p] > previous[p] for p in partitions)
            ):
                moments.append(t)
            previous = values
        moments.append(until)
        return moments

    def longest_gap(self, partitions: set[int], since: float, until: float) -> float:
        """The longest stretch in [since, until] in which none of ``partitions`` progressed."""
        if not partitions:
            return 0.0
        moments = self._moments(partitions, since, until)
        return round(max(b - a for a, b in itertools.pairwise(moments)), 2)

    def each_gap(self, partitions: set[int], since: float, until: float) -> float:
        """The longest stretch without progress of any one of ``partitions``."""
        return max((self.longest_gap({p}, since, until) for p in partitions), default=0.0)

    def redelivered(self) -> int:
        return sum(_deduplicated(m.port) for m in self.members)

    async def measure(
        self, fault: str, act: Callable[[], Coroutine[Any, Any, None]], members_after: int
    ) -> Measured:
        """Run ``act`` (the fault) and measure it until the group is stable with
        ``members_after`` members and every partition progressing again."""
        before = await self.settled(len(self.members), time.monotonic() - 1.0)
        counted = self.redelivered()
        survivors_before = len(before)
        fault_at, fault_wall = time.monotonic(), time.time()
        await act()
        after = await self.settled(members_after, time.monotonic())
        settled_at = time.monotonic()
        await asyncio.sleep(AFTER)
        until, until_wall = time.monotonic(), time.time()
        owner_before = {p: m for m, parts in before.items() for p in parts}
        owner_after = {p: m for m, parts in after.items() for p in parts}
        moved = {p for p in range(PARTITIONS) if owner_before[p] != owner_after[p]}
        unmoved = set(range(PARTITIONS)) - moved
        revoked, away = self.revoked_while_kept(
            {p: owner_after[p] for p in unmoved}, fault_wall, until_wall
        )
        return Measured(
            fault=fault,
            members=f"{survivors_before}->{members_after}",
            moved=len(moved),
            unmoved_revoked=revoked,
            unmoved_away=away,
            unmoved_stall=self.each_gap(unmoved, fault_at, until),
            moved_stall=self.each_gap(moved, fault_at, until),
            total_stall=self.longest_gap(set(range(PARTITIONS)), fault_at, until),
            settled_after=round(settled_at - fault_at, 1),
            redelivered=max(0, self.redelivered() - counted),
        )

    def baseline(self) -> float:
        """The usual longest pause of a partition (the last ``BASELINE`` seconds)."""
        now = time.monotonic()
        return self.each_gap(set(range(PARTITIONS)), now - BASELINE, now)

    # -- the faults -----------------------------------------------------------------------

    async def join(self) -> None:
        self.add_member()

    async def leave(self) -> None:
        member = self.members.pop()
        assert await terminate(member.process) == 0, tail(member.log)

    async def kill(self) -> None:
        member = self.members.pop()
        kill_all([member.process])

    async def freeze_coordinator(self) -> None:
        frozen = self.cluster.broker(await coordinator_of(self.bootstrap, self.group))
        frozen.pause()
        try:
            await asyncio.sleep(FREEZE)
        finally:
            frozen.resume()

    async def rolling_restart(self) -> None:
        for node in range(1, BROKERS + 1):
            broker = self.cluster.broker(node)
            await asyncio.to_thread(broker.stop)
            await asyncio.to_thread(broker.start)
            await in_sync(self.bootstrap)

    # -- the end ----------------------------------------------------------------------------

    async def finish(self, timeout: float = 120.0) -> tuple[int, int]:
        """Stop the load, wait for everything offered, stop the members (each exits 0); the
        snapshots lost and the ones applied twice."""
        self._stop_load.set()
        await self._tasks[0]
        deadline = time.monotonic() + timeout
        while True:
            self._check()
            projected = {
                r["cluster_id"]: r["failure_count"]
                for r in await self.admin.fetch(
                    "SELECT cluster_id, failure_count FROM platform.rule_candidates_pending"
                )
            }
            if projected == self.last_seq or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.3)
        for member in self.members:
            assert await terminate(member.process) == 0, f"{member.name}:\n{tail(member.log)}"
        handled = Counter(
            r["idempotency_key"]
            for r in await self.admin.fetch(
                "SELECT idempotency_key FROM core.event_handled_keys WHERE consumer = $1", CONSUMER
            )
        )
        lost = len(self.keys - set(handled)) + sum(
            1 for key, seq in self.last_seq.items() if projected.get(key) != seq
        )
        twice = sum(count - 1 for count in handled.values())
        assert await read_all(self.bootstrap, dlq_topic(self.topic), timeout=30) == []
        return lost, twice


@asynccontextmanager
async def rebalance_line(  # noqa: PLR0917 - the test's fixtures
    settings: Settings,
    database_url: str,
    env: dict[str, str],
    cluster: LocalKafkaCluster,
    transport: str,
    logs_dir: Path,
) -> AsyncIterator[RebalanceLine]:
    """Topics applied, the load running, two members of ``transport`` progressing."""
    env = {**env, **transport_env(transport), "SPECTRAL_TOPIC_PARTITIONS": str(PARTITIONS)}
    topics_log = logs_dir / "topics.log"
    topics = start_spectral(env, topics_log, "topics", "apply")
    assert await wait_exit(topics, 90) == 0, tail(topics_log)
    admin = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    line = RebalanceLine(settings, env, admin, cluster, logs_dir)
    try:
        line.add_member()
        line.add_member()
        line.start_load()
        await line.settled(2, time.monotonic())
        yield line
    finally:
        kill_all([m.process for m in line.members])
        line._stop_load.set()
        for task in line._tasks:
            task.cancel()
            with suppress(asyncio.CancelledError, Exception):
                await task
        await admin.close()


async def measure_all(line: RebalanceLine) -> list[Measured]:
    """Every fault of the module docstring, in order, on a line of two members."""
    out = [await line.measure("join", line.join, 3)]
    out.append(await line.measure("leave (SIGTERM)", line.leave, 2))
    out.append(await line.measure("SIGKILL", line.kill, 1))
    line.add_member()
    await line.settled(2, time.monotonic())
    out.append(await line.measure(f"coordinator frozen {FREEZE:.0f}s", line.freeze_coordinator, 2))
    out.append(await line.measure("rolling restart", line.rolling_restart, 2))
    return out


def table(transport: str, rows: list[Measured], baseline: float) -> str:
    """The rows as a Markdown table, with the run's baseline."""
    lines = [
        (
            f"REBALANCE {transport}: {RATE:.0f} snapshots/s over {PARTITIONS} partitions; "
            f"a partition's usual longest pause {baseline:.2f}s"
        ),
        (
            "| fault | members | moved | unmoved revoked | unmoved away (s) "
            "| stall of unmoved (s) | stall of moved (s) | total stall (s) | settled after (s) "
            "| redelivered |"
        ),
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines.extend(
        f"| {r.fault} | {r.members} | {r.moved} | {r.unmoved_revoked} | {r.unmoved_away:.2f} "
        f"| {r.unmoved_stall:.2f} | {r.moved_stall:.2f} "
        f"| {r.total_stall:.2f} | {r.settled_after:.1f} | {r.redelivered} |"
        for r in rows
    )
    return "\n".join(lines)
