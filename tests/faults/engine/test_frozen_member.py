"""A member frozen mid-transaction (SIGSTOP) holds its dedup rows locked. The database ends its
idle transaction after SPECTRAL_CONSUMER_IDLE_IN_TRANSACTION_SECONDS, so the member that takes
over its partitions waits seconds, not for as long as the process stays frozen — and exactly
once still holds when the frozen member wakes up."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from contracts import FAILURE_CLUSTER_DETECTED
from spectral.kafka.topics import topic_for
from tests.faults.engine.recording_consumer import CREATE_TABLE
from tests.faults.engine.test_consumer_faults import (
    _assert_exactly_once,
    _count,
    _execute,
    _start_consumer,
    _tail,
)
from tests.kafka_support import (
    cluster_event,
    committed_offsets,
    create_topics,
    end_offsets,
    publish_envelopes,
    transport_env,
    transport_params,
)

pytestmark = [pytest.mark.integration, pytest.mark.faults]

FREEZE_SECONDS = 75.0
IDLE_LIMIT = "3"


async def _idle_in_transaction(url: str) -> int:
    return await _count(
        url,
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND state = 'idle in transaction'",
    )


@pytest.mark.parametrize("transport", transport_params("aiokafka"))
async def test_a_frozen_member_stalls_its_group_for_seconds_and_exactly_once_holds(  # noqa: PLR0917 - fixtures
    database_url: str,
    kafka_bootstrap: str,
    topic_prefix: str,
    spectral_env: dict[str, str],
    tmp_path: Path,
    transport: str,
) -> None:
    spectral_env = {**spectral_env, **transport_env(transport)}
    await _execute(database_url, CREATE_TABLE)
    topic = topic_for(FAILURE_CLUSTER_DETECTED, topic_prefix)
    await create_topics(kafka_bootstrap, [topic], partitions=3)
    events = [cluster_event() for _ in range(600)]
    await publish_envelopes(kafka_bootstrap, topic, events)
    env = {**spectral_env, "SPECTRAL_CONSUMER_IDLE_IN_TRANSACTION_SECONDS": IDLE_LIMIT}

    frozen = _start_consumer({**env, "FAULT_HOLD_SECONDS": "30"}, idle=600, log=tmp_path / "a.log")
    try:
        deadline = time.monotonic() + 60
        while await _idle_in_transaction(database_url) == 0:
            assert time.monotonic() < deadline, _tail(tmp_path / "a.log")
            await asyncio.sleep(0.05)
        os.kill(frozen.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()

        taker = _start_consumer(env, idle=600, log=tmp_path / "b.log")
        try:
            # The taker gets every partition once the frozen member's Kafka session expires
            # (10 s); the frozen transaction was ended after 3 s, so its keys are free by then.
            while await _count(database_url, "SELECT count(*) FROM fault_effects") < len(events):
                waited = time.monotonic() - stopped_at
                assert waited < FREEZE_SECONDS - 5, (
                    "the group waited on the frozen member's locks\n" + _tail(tmp_path / "b.log")
                )
                await asyncio.sleep(0.2)
            took = time.monotonic() - stopped_at
            await _assert_exactly_once(database_url, {e.idempotency_key for e in events})

            # The frozen member wakes up: its transaction is gone, it applies nothing twice.
            await asyncio.sleep(max(FREEZE_SECONDS - took, 0) / 10)
            os.kill(frozen.pid, signal.SIGCONT)
            await asyncio.sleep(5)
            for proc in (frozen, taker):
                proc.send_signal(signal.SIGTERM)
            for proc, log in ((frozen, "a.log"), (taker, "b.log")):
                assert proc.wait(timeout=60) == 0, _tail(tmp_path / log)
        finally:
            if taker.poll() is None:
                taker.kill()
    finally:
        if frozen.poll() is None:
            os.kill(frozen.pid, signal.SIGCONT)
            frozen.kill()
    await _assert_exactly_once(database_url, {e.idempotency_key for e in events})
    group = topic_prefix + "fault-recorder"
    assert await committed_offsets(kafka_bootstrap, group, topic) == await end_offsets(
        kafka_bootstrap, topic
    )
    assert took < 30, f"the group stalled {took:.0f} s behind a frozen member"
