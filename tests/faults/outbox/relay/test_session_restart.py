"""A relay session ended by a transient fault of a publish, and the sessions after it.

The faults: the first publish finds its topic missing from the cluster's metadata (what the
producer raises when a topic it asked for does not appear within its request timeout: a topic
created after the relay started), or an acknowledgement is lost after the broker wrote the
record. The session ends, the relay starts a new one, and that one must publish everything:
the rows of the failed batch, and every row written afterwards, woken by the doorbell as
before (the relays here poll every 30 s, so a row published within seconds was published
because the doorbell rang). Nothing of the old session may linger: its shard locks, its
doorbell slot, its batch, its backoff.

The faults are injected in the relay's own producer, which otherwise sends to the real broker;
the database and the broker are real.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Sequence
from typing import Any, Literal

import pytest
from aiokafka.errors import RequestTimedOutError, UnknownTopicOrPartitionError
from prometheus_client import CollectorRegistry

from spectral.outbox.relay import OutboxRelay, RelayMetrics, RelayOptions
from spectral.outbox.relay.publish import Outcome, Outgoing, Publisher
from spectral.retry import Backoff
from spectral.settings import Settings
from tests.integration.outbox.relay.support import (
    EVENT_TYPE,
    assert_in_order_without_gaps,
    by_key,
    enqueue_numbered,
    key_id,
    outbox_counts,
    read_topic,
)
from tests.integration.outbox.relay.test_wakeup import running, wait_asleep
from tests.kafka_support import PRODUCING, TRANSPORTS
from tests.support import eventually

pytestmark = [pytest.mark.integration, pytest.mark.faults]

SLEEPY = 30.0
"""The relays' poll interval: far longer than any wait below."""
PROMPT = 15.0
"""How long the relay may take to publish after a restart on a loaded machine (half SLEEPY)."""

Fault = Literal["ok", "missing topic", "lost ack"]


class _Flaky:
    """The relay's real publisher, whose records fail as ``faults`` says, one entry per record
    (the faults are the relay's, shared by the publishers of its sessions): ``missing topic``
    stops the sending there with what the producer raises when the topic is not in the
    cluster's metadata in time (the records before it are sent, none after), ``lost ack``
    sends the record and loses its acknowledgement."""

    def __init__(self, inner: Publisher, faults: deque[Fault]) -> None:
        self._inner = inner
        self._faults = faults

    async def start(self) -> None:
        await self._inner.start()

    async def stop(self) -> None:
        await self._inner.stop()

    async def publish(
        self, records: Sequence[Outgoing]
    ) -> tuple[list[Outcome], BaseException | None]:
        faults = [self._faults.popleft() if self._faults else "ok" for _ in records]
        if "missing topic" in faults:
            cut = faults.index("missing topic")
            self._faults.extendleft(reversed(faults[cut + 1 :]))  # those records were not sent
            sent, failure = await self._inner.publish(records[:cut])
            return [*sent, *([None] * (len(records) - cut))], failure or (
                UnknownTopicOrPartitionError()
            )
        sent, failure = await self._inner.publish(records)
        return [
            _lost(outcome)
            if fault == "lost ack" and isinstance(outcome, asyncio.Future)
            else outcome
            for outcome, fault in zip(sent, faults, strict=True)
        ], failure


def _lost(ack: asyncio.Future[Any]) -> asyncio.Future[Any]:
    """A future that fails (a request timeout) once ``ack`` is settled, whatever its outcome."""
    lost: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def lose(done: asyncio.Future[Any]) -> None:
        if not done.cancelled():
            done.exception()  # retrieved: the record's real outcome is not reported
        lost.set_exception(RequestTimedOutError())

    ack.add_done_callback(lose)
    return lost


class FlakyRelay(OutboxRelay):
    """An outbox relay whose sends fail as ``faults`` says (see :class:`_Flaky`)."""

    def __init__(self, settings: Settings, registry: CollectorRegistry, **options: Any) -> None:
        assert settings.kafka_bootstrap is not None
        assert settings.database_url is not None
        super().__init__(
            settings,
            kafka_bootstrap=settings.kafka_bootstrap,
            database_url=settings.database_url.get_secret_value(),
            metrics=RelayMetrics(registry),
            options=RelayOptions(**{"poll_interval": SLEEPY, **options}),
        )
        self.faults: deque[Fault] = deque()

    def _producer(self) -> Publisher:
        return _Flaky(super()._producer(), self.faults)


async def wait_published(database_url: str, rows: int, timeout: float = PROMPT) -> None:
    async def done() -> bool:
        return await outbox_counts(database_url) == (rows, 0)

    await eventually(done, timeout=timeout, interval=0.05)


def kafka_faults(registry: CollectorRegistry) -> float:
    value = registry.get_sample_value("spectral_outbox_relay_errors_total", {"component": "kafka"})
    return value or 0.0


async def check_topic(bootstrap: str, topic: str, keys: int, last: int) -> None:
    seqs = by_key(await read_topic(bootstrap, topic))
    assert len(seqs) == keys
    for numbers in seqs.values():
        assert_in_order_without_gaps(numbers, last)


def pairs(keys: int, first: int, last: int) -> list[tuple[Any, int]]:
    return [(key_id(k), s) for s in range(first, last + 1) for k in range(keys)]


async def timed(what: Awaitable[None]) -> float:
    loop = asyncio.get_running_loop()
    started = loop.time()
    await what
    return loop.time() - started


@pytest.mark.parametrize("transport", PRODUCING)
async def test_a_first_publish_on_a_missing_topic_restarts_the_session_which_publishes_all(
    settings: Settings, database_url: str, kafka_bootstrap: str, topic_prefix: str, transport: str
) -> None:
    settings = settings.replace(**TRANSPORTS[transport])
    keys = 20
    await enqueue_numbered(database_url, pairs(keys, 1, 50))
    registry = CollectorRegistry()
    relay = FlakyRelay(settings, registry, batch=40)
    relay.faults.append("missing topic")
    async with running(relay):
        await wait_published(database_url, keys * 50)
        assert relay._report.sessions == 2
        assert kafka_faults(registry) == 1
        # The new session sleeps on the doorbell like the first one would have, and wakes.
        for round_ in range(2):
            await wait_asleep(database_url, timeout=PROMPT)
            first = 51 + 5 * round_
            await enqueue_numbered(database_url, pairs(keys, first, first + 4))
            await wait_published(database_url, keys * (first + 4))
    assert relay._report.sessions == 2
    await check_topic(kafka_bootstrap, topic_prefix + EVENT_TYPE, keys, 60)


@pytest.mark.parametrize("fault", ["missing topic", "lost ack"])
async def test_a_woken_relay_whose_publish_fails_publishes_after_its_restart_and_sleeps_again(
    settings: Settings, database_url: str, kafka_bootstrap: str, topic_prefix: str, fault: Fault
) -> None:
    """The fault meets a relay that was asleep on its doorbell slot: the slot must not stay
    with the dead session, the new session must take it and be woken."""
    keys = 8
    registry = CollectorRegistry()
    relay = FlakyRelay(settings, registry, batch=40)
    healthy: list[Fault] = ["ok"] * 3
    relay.faults.extend([*healthy, fault])
    async with running(relay):
        await wait_asleep(database_url, timeout=PROMPT)
        await enqueue_numbered(database_url, pairs(keys, 1, 1))
        await wait_published(database_url, keys)
        assert relay._report.sessions == 2
        for seq in range(2, 5):
            await wait_asleep(database_url, timeout=PROMPT)
            await enqueue_numbered(database_url, pairs(keys, seq, seq))
            await wait_published(database_url, keys * seq)
    assert relay._report.sessions == 2
    assert kafka_faults(registry) == 1
    await check_topic(kafka_bootstrap, topic_prefix + EVENT_TYPE, keys, 4)


async def test_faults_far_apart_each_back_off_from_the_start(
    settings: Settings, database_url: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    """A session that got going ends the faults before it: the next fault backs off by the
    first step again (2 s here), not by a delay grown over the relay's whole life (16 s by the
    fourth fault)."""
    keys = 4
    registry = CollectorRegistry()
    relay = FlakyRelay(settings, registry, batch=40, backoff=Backoff(base=2.0, cap=30.0))
    async with running(relay):
        await wait_asleep(database_url, timeout=PROMPT)
        for seq in range(1, 5):
            relay.faults.append("missing topic")
            elapsed = await timed(enqueue_then_published(database_url, keys, seq))
            assert relay._report.sessions == seq + 1
            assert elapsed < 10.0, (seq, elapsed)
            await wait_asleep(database_url, timeout=PROMPT)
    await check_topic(kafka_bootstrap, topic_prefix + EVENT_TYPE, keys, 4)


async def enqueue_then_published(database_url: str, keys: int, seq: int) -> None:
    await enqueue_numbered(database_url, pairs(keys, seq, seq))
    await wait_published(database_url, keys * seq)
