"""The outbox relay under real faults: SIGKILL between publish and mark, SIGKILL at random
moments, one of two relays killed, SIGTERM. Nothing is lost and a key's events never overtake
each other; a duplicate (the same idempotency_key again) is allowed — consumers deduplicate.

The relay runs as `spectral outbox relay` subprocesses with the test's environment. The exact
"after the acks, before the mark" moment is reached with the test-only hook
SPECTRAL_RELAY_CRASH_AFTER_PUBLISH=1 (os._exit right there); the other kills are timed.
"""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.outbox.relay.support import (
    EVENT_TYPE,
    Received,
    assert_in_order_without_gaps,
    by_key,
    enqueue_numbered,
    key_id,
    outbox_counts,
    read_topic,
)
from tests.support import eventually

pytestmark = [pytest.mark.integration, pytest.mark.faults]

ROOT = Path(__file__).resolve().parents[4]
SPECTRAL = str(Path(sys.executable).with_name("spectral"))


def start_relay(
    env: dict[str, str], log: Path, *args: str, crash: bool = False
) -> subprocess.Popen[bytes]:
    run_env = dict(env)
    if crash:
        run_env["SPECTRAL_RELAY_CRASH_AFTER_PUBLISH"] = "1"
    return subprocess.Popen(
        [SPECTRAL, "outbox", "relay", "--poll-interval", "0.05", *args],
        cwd=ROOT,
        env=run_env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("ab"),
    )


async def wait_exit(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> int:
    loop = asyncio.get_running_loop()
    return await asyncio.wait_for(loop.run_in_executor(None, proc.wait), timeout)


async def published_count(database_url: str) -> int:
    total, unpublished = await outbox_counts(database_url)
    return total - unpublished


def check_complete_and_ordered(records: list[Received], keys: int, last: int) -> Counter[str]:
    seqs = by_key(records)
    assert len(seqs) == keys
    for numbers in seqs.values():
        assert_in_order_without_gaps(numbers, last)
    return Counter(r.idempotency_key for r in records)


async def test_killed_between_publish_and_mark_it_republishes_and_loses_nothing(
    spectral_env: dict[str, str],
    database_url: str,
    kafka_bootstrap: str,
    topic_prefix: str,
    tmp_path: Path,
) -> None:
    await enqueue_numbered(database_url, [(key_id(k), s) for s in range(1, 11) for k in range(6)])
    crashed = start_relay(spectral_env, tmp_path / "relay.log", "--batch", "25", crash=True)
    assert await wait_exit(crashed) == 137
    assert await outbox_counts(database_url) == (60, 60)  # acknowledged, never marked
    topic = topic_prefix + EVENT_TYPE
    assert len(await read_topic(kafka_bootstrap, topic)) == 25

    again = start_relay(spectral_env, tmp_path / "relay.log", "--once")
    assert await wait_exit(again) == 0
    assert await outbox_counts(database_url) == (60, 0)
    records = await read_topic(kafka_bootstrap, topic)
    assert len(records) == 85  # the first 25 twice: duplicates, not losses
    counts = check_complete_and_ordered(records, keys=6, last=10)
    assert len(counts) == 60
    assert sorted(counts.values()) == [1] * 35 + [2] * 25


async def test_sigkill_at_random_moments_loses_nothing(
    spectral_env: dict[str, str],
    database_url: str,
    kafka_bootstrap: str,
    topic_prefix: str,
    tmp_path: Path,
) -> None:
    keys, rounds = 20, 150
    rng = random.Random(20)
    for start in range(1, rounds + 1, 50):
        # Rows of its own for each relay: one that drains everything before its kill (a fast
        # relay on a quiet machine can) would leave the next one nothing to make progress on.
        await enqueue_numbered(
            database_url,
            [(key_id(k), s) for s in range(start, start + 50) for k in range(keys)],
        )
        before = await published_count(database_url)
        relay = start_relay(spectral_env, tmp_path / "relay.log", "--batch", "40")

        async def progressed(floor: int = before) -> bool:
            return await published_count(database_url) > floor

        await eventually(progressed, timeout=30, interval=0.02)
        await asyncio.sleep(rng.uniform(0.0, 0.2))
        relay.send_signal(signal.SIGKILL)
        assert await wait_exit(relay) == -signal.SIGKILL
    final = start_relay(spectral_env, tmp_path / "relay.log", "--once")
    assert await wait_exit(final, 60) == 0
    assert await outbox_counts(database_url) == (keys * rounds, 0)
    records = await read_topic(kafka_bootstrap, topic_prefix + EVENT_TYPE, timeout=60)
    counts = check_complete_and_ordered(records, keys=keys, last=rounds)
    assert len(counts) == keys * rounds


async def test_one_of_two_relays_killed_the_other_takes_its_keys_over(
    spectral_env: dict[str, str],
    database_url: str,
    kafka_bootstrap: str,
    topic_prefix: str,
    tmp_path: Path,
) -> None:
    keys, rounds = 30, 60
    relays = [
        start_relay(spectral_env, tmp_path / f"relay{i}.log", "--batch", "20") for i in range(2)
    ]
    try:
        # Both relays hold shards before the kill (on a loaded machine the second one may take a
        # while to start; without this the survivor could own all 16 from the beginning).
        async def both_hold_shards() -> bool:
            logs = [(tmp_path / f"relay{i}.log") for i in range(2)]
            return all(log.exists() and '"acquired shards"' in log.read_text() for log in logs)

        await eventually(both_hold_shards, timeout=60)
        for seq in range(1, rounds + 1):
            await enqueue_numbered(database_url, [(key_id(k), seq) for k in range(keys)])
            if seq == rounds // 2:
                relays[0].send_signal(signal.SIGKILL)
            await asyncio.sleep(0.03)

        async def drained() -> bool:
            return (await outbox_counts(database_url))[1] == 0

        await eventually(drained, timeout=60)
        relays[1].send_signal(signal.SIGTERM)
        assert await wait_exit(relays[1]) == 0
        assert await wait_exit(relays[0]) == -signal.SIGKILL
    finally:
        for relay in relays:
            if relay.poll() is None:
                relay.kill()
    records = await read_topic(kafka_bootstrap, topic_prefix + EVENT_TYPE, timeout=60)
    counts = check_complete_and_ordered(records, keys=keys, last=rounds)
    assert len(counts) == keys * rounds
    # The survivor took the dead relay's shards over: a second "acquired shards", ending with
    # all of them.
    survivor = (tmp_path / "relay1.log").read_text().splitlines()
    acquired = [line for line in survivor if '"acquired shards"' in line]
    assert len(acquired) >= 2, survivor
    assert '"held": 16' in acquired[-1]


async def test_sigterm_finishes_the_batch_in_flight_and_exits_zero(
    spectral_env: dict[str, str],
    database_url: str,
    kafka_bootstrap: str,
    topic_prefix: str,
    tmp_path: Path,
) -> None:
    await enqueue_numbered(database_url, [(key_id(k), s) for s in range(1, 101) for k in range(20)])
    relay = start_relay(spectral_env, tmp_path / "relay.log", "--batch", "50")

    async def started() -> bool:
        return await published_count(database_url) > 0

    await eventually(started, timeout=30, interval=0.02)
    relay.send_signal(signal.SIGTERM)
    assert await wait_exit(relay, 15) == 0
    marked = await published_count(database_url)
    records = await read_topic(kafka_bootstrap, topic_prefix + EVENT_TYPE)
    # Graceful: everything it published it also marked (no duplicate will follow).
    assert len(records) == marked
    assert len({r.idempotency_key for r in records}) == marked
