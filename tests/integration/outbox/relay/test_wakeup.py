"""The outbox doorbell (migration outbox_wakeup): an idle relay sleeps on LISTEN and a writer
wakes it, only while it sleeps, whatever the writer's role or isolation level; a writer in flight
keeps relays from sleeping; a lost notification costs at most the poll interval.

The relays here poll every 30 s, so a row published within a few seconds was published because
the doorbell rang (or because the relay could not sleep), never by the fallback poll.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Literal

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from spectral.kafka.freshness import READY_AT_HEADER
from spectral.outbox.relay import OutboxRelay
from spectral.outbox.relay.repository import WAKEUP_CHANNEL
from spectral.outbox.relay.shards import DOORBELL_BASE, LOCK_CLASS, MEMBER_LOCK, SHARD_COUNT
from spectral.outbox.writer import OutboxItem, enqueue
from spectral.settings import Settings
from tests.integration.outbox.relay.support import (
    EVENT_TYPE,
    key_id,
    make_relay,
    numbered,
    outbox_counts,
    read_topic,
)
from tests.support import eventually

pytestmark = pytest.mark.integration

SLEEPY = 30.0
"""The relays' poll interval: far longer than any wait below."""
PROMPT = 10.0
"""How long a woken relay may take to publish on a loaded machine (still a third of SLEEPY)."""
SETTLE = 30.0
"""How long relays may take to share their shards out and fall asleep (set-up, not a claim)."""

_SLEEPERS = """
SELECT count(*) FROM pg_locks
WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database
                                             WHERE datname = current_database())
  AND classid = $1::int::oid AND objid >= $2::int::oid AND mode = 'ExclusiveLock' AND granted
"""


_WAITERS = _SLEEPERS.replace("AND granted", "AND NOT granted")
_JOINING = """
SELECT count(*) FROM pg_locks
WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database
                                             WHERE datname = current_database())
  AND classid = $1::int::oid AND objid = $2::int::oid AND mode = 'ShareLock' AND NOT granted
"""


def _relay(settings: Settings, registry: CollectorRegistry, **options: object) -> OutboxRelay:
    return make_relay(settings, registry, **{"poll_interval": SLEEPY, **options})


@contextlib.asynccontextmanager
async def running(relay: OutboxRelay) -> AsyncIterator[None]:
    task = asyncio.create_task(relay.run())
    try:
        yield
    finally:
        relay.stop()
        await asyncio.wait_for(task, 30)


async def doorbell_waiters(database_url: str) -> int:
    conn = await asyncpg.connect(database_url)
    try:
        return int(await conn.fetchval(_WAITERS, LOCK_CLASS, DOORBELL_BASE))
    finally:
        await conn.close()


async def sleeping_relays(database_url: str) -> int:
    conn = await asyncpg.connect(database_url)
    try:
        return int(await conn.fetchval(_SLEEPERS, LOCK_CLASS, DOORBELL_BASE))
    finally:
        await conn.close()


async def wait_asleep(database_url: str, relays: int = 1, timeout: float = PROMPT) -> None:
    async def asleep() -> bool:
        return await sleeping_relays(database_url) == relays

    await eventually(asleep, timeout=timeout, interval=0.05)


async def wait_published(database_url: str, rows: int) -> None:
    async def done() -> bool:
        return await outbox_counts(database_url) == (rows, 0)

    await eventually(done, timeout=PROMPT, interval=0.05)


Isolation = Literal["read_committed", "repeatable_read", "serializable"]


async def write(database_url: str, seq: int, *, role: str | None, isolation: Isolation) -> None:
    conn = await asyncpg.connect(database_url, server_settings={"role": role} if role else None)
    try:
        async with conn.transaction(isolation=isolation):
            await enqueue(conn, [OutboxItem(numbered(key_id(seq), seq), str(key_id(seq)))])
    finally:
        await conn.close()


async def test_a_sleeping_relay_is_woken_by_every_writer_role_and_isolation_level(
    settings: Settings, database_url: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    registry = CollectorRegistry()
    writers: list[tuple[str | None, Isolation]] = [
        ("spectral_producer", "read_committed"),
        ("spectral_executor", "read_committed"),
        ("spectral_producer", "repeatable_read"),
        ("spectral_executor", "serializable"),
        (None, "serializable"),  # the owner
    ]
    async with running(_relay(settings, registry)):
        for seq, (role, isolation) in enumerate(writers, start=1):
            await wait_asleep(database_url)
            before = datetime.now(UTC)
            await write(database_url, seq, role=role, isolation=isolation)
            await wait_published(database_url, seq)
            assert (datetime.now(UTC) - before).total_seconds() < PROMPT, (role, isolation)
    notified = registry.get_sample_value("spectral_outbox_relay_wakeups_total", {"cause": "notify"})
    assert (notified or 0) >= len(writers)
    assert registry.get_sample_value("spectral_outbox_relay_wakeups_total", {"cause": "poll"}) in (
        0,
        None,
    )
    delays = registry.get_sample_value("spectral_outbox_relay_delay_seconds_count")
    assert delays == len(writers)
    records = await read_topic(kafka_bootstrap, topic_prefix + EVENT_TYPE)
    assert len(records) == len(writers)


async def test_a_writer_in_flight_keeps_relays_awake_until_it_commits(
    settings: Settings, database_url: str
) -> None:
    """The race the doorbell must survive: a writer inserts while no relay sleeps (so it does
    not ring) and commits only after a relay read the outbox. The relay cannot take its slot
    while the writer is in flight: it waits for the slot, so it is not asleep when the writer
    commits, and it publishes the row at once (not a poll interval later)."""
    writer = await asyncpg.connect(database_url, server_settings={"role": "spectral_producer"})
    try:
        transaction = writer.transaction()
        await transaction.start()
        await enqueue(writer, [OutboxItem(numbered(key_id(1), 1), str(key_id(1)))])
        async with running(_relay(settings, CollectorRegistry())):

            async def waiting() -> bool:
                return await doorbell_waiters(database_url) == 1

            await eventually(waiting, timeout=PROMPT, interval=0.05)
            assert await sleeping_relays(database_url) == 0  # no slot while the writer is open
            await transaction.commit()
            await wait_published(database_url, 1)
            await wait_asleep(database_url)  # and once nobody is in flight, it sleeps
    finally:
        await writer.close()


@contextlib.asynccontextmanager
async def joining_together(database_url: str, relays: int) -> AsyncIterator[None]:
    """Hold the relays' membership lock exclusively while ``relays`` relays start, and let them
    all in at once: each counts the others at its first rebalance and takes its share. (A relay
    that counted itself alone takes every shard and sleeps, here for 30 s, before it gives its
    surplus back; a newcomer that finds every shard held waits as long.)"""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("SELECT pg_advisory_lock($1::int, $2::int)", LOCK_CLASS, MEMBER_LOCK)
        yield

        async def waiting() -> bool:
            return int(await conn.fetchval(_JOINING, LOCK_CLASS, MEMBER_LOCK)) == relays

        await eventually(waiting, timeout=SETTLE, interval=0.05)
        await conn.execute("SELECT pg_advisory_unlock($1::int, $2::int)", LOCK_CLASS, MEMBER_LOCK)
    finally:
        await conn.close()


async def test_two_sleeping_relays_are_both_woken(
    settings_factory: Callable[..., Settings], database_url: str
) -> None:
    settings = settings_factory()
    registries = [CollectorRegistry(), CollectorRegistry()]
    relays = [_relay(settings, registry, rebalance_interval=0.2) for registry in registries]
    async with contextlib.AsyncExitStack() as stack:
        async with joining_together(database_url, len(relays)):
            for relay in relays:
                await stack.enter_async_context(running(relay))

        async def shared_out() -> bool:
            held = [r.get_sample_value("spectral_outbox_relay_shards_held") for r in registries]
            return held == [SHARD_COUNT // 2] * 2

        await eventually(shared_out, timeout=SETTLE)
        await wait_asleep(database_url, relays=2, timeout=SETTLE)
        keys = [key_id(n) for n in range(SHARD_COUNT * 4)]  # both relays' shards, surely
        conn = await asyncpg.connect(database_url)
        try:
            async with conn.transaction():
                await enqueue(conn, [OutboxItem(numbered(k, 1), str(k)) for k in keys])
        finally:
            await conn.close()
        await wait_published(database_url, len(keys))
    for registry in registries:
        published = registry.get_sample_value("spectral_outbox_relay_published_total")
        assert (published or 0) > 0
        woken = registry.get_sample_value(
            "spectral_outbox_relay_wakeups_total", {"cause": "notify"}
        )
        assert (woken or 0) >= 1


async def test_a_lost_notification_costs_at_most_the_poll_interval(
    settings: Settings, database_url: str
) -> None:
    registry = CollectorRegistry()
    async with running(_relay(settings, registry, poll_interval=1.0)):
        await wait_asleep(database_url)
        conn = await asyncpg.connect(database_url)
        try:
            await conn.execute("ALTER TABLE core.outbox DISABLE TRIGGER outbox_ring_doorbell")
            await write(database_url, 1, role="spectral_producer", isolation="read_committed")
        finally:
            await conn.close()
        await wait_published(database_url, 1)
    assert (
        registry.get_sample_value("spectral_outbox_relay_wakeups_total", {"cause": "poll"}) or 0
    ) >= 1


class _Listener:
    """A plain LISTEN session on the doorbell's channel, with a sentinel to know it has seen
    everything committed before."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn
        self.payloads: list[str] = []
        self.sentinels = 0

    def __call__(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        self.payloads.append(str(payload))

    async def settled(self) -> list[str]:
        """Everything notified before now, without the sentinels."""
        self.sentinels += 1
        mark = f"sentinel-{self.sentinels}"
        await self.conn.execute(f"NOTIFY {WAKEUP_CHANNEL}, '{mark}'")

        async def seen() -> bool:
            return mark in self.payloads

        await eventually(seen, timeout=PROMPT, interval=0.02)
        return [p for p in self.payloads if not p.startswith("sentinel-")]


async def test_writers_notify_only_while_a_slot_is_held_and_every_slot_counts(
    database_url: str,
) -> None:
    listen = await asyncpg.connect(database_url)
    relay = await asyncpg.connect(database_url, server_settings={"role": "spectral_relay"})
    listener = _Listener(listen)
    await listen.add_listener(WAKEUP_CHANNEL, listener)
    try:
        seq = 0
        isolations: tuple[Isolation, ...] = ("read_committed", "repeatable_read", "serializable")
        for isolation in isolations:
            seq += 1
            await write(database_url, seq, role="spectral_producer", isolation=isolation)
        assert await listener.settled() == []  # nobody sleeps: no writer notified
        for slot in range(SHARD_COUNT):
            objid = DOORBELL_BASE + slot
            assert await relay.fetchval("SELECT pg_try_advisory_lock($1, $2)", LOCK_CLASS, objid)
            seq += 1
            await write(database_url, seq, role="spectral_executor", isolation="repeatable_read")
            assert await relay.fetchval("SELECT pg_advisory_unlock($1, $2)", LOCK_CLASS, objid)
            assert await listener.settled() == [""] * (slot + 1), slot
        seq += 1
        await write(database_url, seq, role="spectral_producer", isolation="read_committed")
        assert len(await listener.settled()) == SHARD_COUNT  # slots given back: quiet again
    finally:
        await listen.close()
        await relay.close()


async def test_every_record_says_when_its_row_became_publishable(
    settings: Settings, database_url: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    before = datetime.now(UTC)
    await write(database_url, 1, role="spectral_producer", isolation="read_committed")
    later = datetime(2020, 1, 1, tzinfo=UTC)  # an available_at in the past: ready at its write
    conn = await asyncpg.connect(database_url)
    try:
        async with conn.transaction():
            await enqueue(conn, [OutboxItem(numbered(key_id(2), 1), str(key_id(2)), later)])
        written = await conn.fetchval("SELECT max(created_at) FROM core.outbox")
    finally:
        await conn.close()
    await _relay(settings, CollectorRegistry(), once=True).run()
    after = datetime.now(UTC)
    records = await read_topic(kafka_bootstrap, topic_prefix + EVENT_TYPE)
    stamps = {r.key: datetime.fromisoformat(r.headers[READY_AT_HEADER]) for r in records}
    assert before <= stamps[str(key_id(1))] <= after
    assert stamps[str(key_id(2))] == written
