"""``stop_when_idle`` without servers: partitions that move while the idle probe runs are not
idle time. The outages themselves are covered against a real broker in tests/faults."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import pytest
from aiokafka import TopicPartition
from prometheus_client import CollectorRegistry

from spectral.engine.engine import JOIN_PATIENCE_SECONDS, ConsumerEngine, EngineOptions
from spectral.engine.handler import Delivery, Handler, HandlerResult
from spectral.settings import Settings
from tests.support import no_task_left_since

IDLE = 60.0


class _Nothing(Handler[None]):
    name = "idle-test"
    event_types = ("platform.failure_cluster.detected",)

    async def apply(self, conn: Any, deliveries: Sequence[Delivery]) -> HandlerResult[None]:  # noqa: ARG002
        return HandlerResult()


def _idle_engine() -> ConsumerEngine:
    engine = ConsumerEngine(
        _Nothing(),
        Settings(),
        kafka_bootstrap="127.0.0.1:9",
        database_url="postgresql://unused@127.0.0.1:9/unused",
        options=EngineOptions(stop_when_idle=IDLE),
        registry=CollectorRegistry(),
    )
    engine._busy_at = time.monotonic() - 2 * IDLE
    engine._joined = True  # a member the group has given its partitions
    return engine


async def test_partitions_assigned_while_the_idle_probe_runs_are_not_idle() -> None:
    # A member left: its partitions (and their unread records) came to this member while the
    # broker answered the probe. The run must read them, not stop a moment after they came.
    engine = _idle_engine()

    async def rebalanced_meanwhile() -> str | None:
        engine._assigned([TopicPartition("t", 0)])
        return None

    engine._unreachable = rebalanced_meanwhile  # type: ignore[method-assign]
    assert not await engine._idle(time.monotonic() - 2 * IDLE)


async def test_an_idle_member_whose_servers_answer_stops() -> None:
    engine = _idle_engine()

    async def answering() -> str | None:
        return None

    engine._unreachable = answering  # type: ignore[method-assign]
    assert await engine._idle(time.monotonic() - 2 * IDLE)


async def test_a_member_not_given_its_partitions_yet_is_not_idle() -> None:
    # Joining took longer than the idle time (a busy machine): it has nothing to read yet.
    engine = _idle_engine()
    engine._joined = False

    async def answering() -> str | None:
        return None

    engine._unreachable = answering  # type: ignore[method-assign]
    assert not await engine._idle(time.monotonic() - 2 * IDLE)
    engine._created_at = time.monotonic() - max(IDLE, JOIN_PATIENCE_SECONDS)  # never answered
    assert await engine._idle(time.monotonic() - 2 * IDLE)


async def test_a_member_that_has_not_read_what_it_owns_is_not_idle() -> None:
    # Its first fetch after an assignment has not come back: records wait on its partitions.
    engine = _idle_engine()
    behind = True

    async def answering() -> str | None:
        return None

    async def caught_up() -> bool:
        return not behind

    engine._unreachable = answering  # type: ignore[method-assign]
    engine.source.caught_up = caught_up  # type: ignore[method-assign]
    assert not await engine._idle(time.monotonic() - 2 * IDLE)
    behind = False
    assert await engine._idle(time.monotonic() - 2 * IDLE)


async def test_a_source_that_never_says_it_caught_up_holds_a_member_for_a_bounded_time() -> None:
    engine = _idle_engine()

    async def answering() -> str | None:
        return None

    async def never() -> bool:
        return False

    engine._unreachable = answering  # type: ignore[method-assign]
    engine.source.caught_up = never  # type: ignore[method-assign]
    assert not await engine._idle(time.monotonic() - 2 * IDLE)
    engine._moved_at = time.monotonic() - JOIN_PATIENCE_SECONDS  # assigned that long ago
    assert await engine._idle(time.monotonic() - 2 * IDLE)


async def test_a_member_whose_partitions_were_lost_is_not_idle_until_given_them_again() -> None:
    # Behind a broker outage longer than its session the classic protocol loses the member's
    # partitions (a revocation the engine is told of); long after its last assignment, it
    # owns nothing until it joined again: not idle, or it stops with their records unread
    # and their offsets not committed.
    engine = _idle_engine()
    engine._moved_at = time.monotonic() - 2 * JOIN_PATIENCE_SECONDS  # assigned long ago
    given_back = False

    async def answering() -> str | None:
        return None

    async def caught_up() -> bool:
        return given_back

    engine._unreachable = answering  # type: ignore[method-assign]
    engine.source.caught_up = caught_up  # type: ignore[method-assign]
    await engine._revoking([TopicPartition("t", 0)])
    engine._busy_at = time.monotonic() - 2 * IDLE
    assert not await engine._idle(time.monotonic() - 2 * IDLE)
    given_back = True
    assert await engine._idle(time.monotonic() - 2 * IDLE)


async def test_a_member_back_after_an_outage_asks_its_source_again() -> None:
    # The outage ended long after the last assignment: partitions lost meanwhile come back
    # only once the member joined again, so the source is asked before the member stops.
    engine = _idle_engine()
    engine._moved_at = time.monotonic() - 2 * JOIN_PATIENCE_SECONDS
    engine._outage = True  # the last probe found the broker away
    asked = 0

    async def answering() -> str | None:
        return None

    async def caught_up() -> bool:
        nonlocal asked
        asked += 1
        return False

    engine._unreachable = answering  # type: ignore[method-assign]
    engine.source.caught_up = caught_up  # type: ignore[method-assign]
    assert not await engine._idle(time.monotonic() - 2 * IDLE)  # back: counted again
    engine._busy_at = time.monotonic() - 2 * IDLE
    assert not await engine._idle(time.monotonic() - 2 * IDLE)
    assert asked == 1


async def _probing_a_frozen_server(engine: ConsumerEngine) -> asyncio.Task[bool]:
    """``engine._idle`` under way, its probe waiting on a server that answers nothing (each
    probe waits IDLE_PROBE_SECONDS before it counts as unreachable)."""
    asked = asyncio.Event()

    async def frozen() -> str | None:
        asked.set()
        await asyncio.Event().wait()
        return None

    engine._unreachable = frozen  # type: ignore[method-assign]
    idle = asyncio.create_task(engine._idle(time.monotonic() - 2 * IDLE))
    await asked.wait()
    return idle


async def test_a_stop_during_the_idle_probe_ends_the_run_without_waiting_for_it() -> None:
    # SIGTERM while the probe waits on a frozen server: the run must not wait for the probe.
    engine = _idle_engine()
    idle = await _probing_a_frozen_server(engine)
    engine.stop()
    assert not await asyncio.wait_for(idle, timeout=5)


async def test_a_run_cancelled_during_the_idle_probe_leaves_no_probe_behind() -> None:
    engine = _idle_engine()
    before = set(asyncio.all_tasks())
    idle = await _probing_a_frozen_server(engine)
    idle.cancel()
    with pytest.raises(asyncio.CancelledError):
        await idle
    await no_task_left_since(before, timeout=5)
