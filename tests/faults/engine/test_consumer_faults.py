"""Real faults under the consumer engine: SIGKILL mid-stream, PostgreSQL or the broker stopped
mid-stream, SIGTERM.

The handler appends a row per applied event (not idempotent by itself), so "exactly once" is
checked strictly: every key has exactly one row, whatever was killed or stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer
from prometheus_client import CollectorRegistry

from contracts import FAILURE_CLUSTER_DETECTED
from spectral.db.migrate import migrate
from spectral.devstack.kafka import LocalKafka
from spectral.devstack.kafka_jars import default_cache_dir
from spectral.devstack.postgres import LocalPostgres
from spectral.engine.engine import ConsumerEngine, EngineOptions
from spectral.kafka.groups import describe_group
from spectral.kafka.topics import dlq_topic, topic_for
from spectral.retry import Backoff
from spectral.settings import Settings, load_settings
from tests.events import encode
from tests.faults.engine.recording_consumer import CREATE_TABLE, AppendingHandler
from tests.kafka_support import (
    cluster_event,
    committed_offsets,
    create_topics,
    end_offsets,
    publish_envelopes,
    read_all,
    transport_env,
    transport_params,
)
from tests.support import eventually

pytestmark = [pytest.mark.integration, pytest.mark.faults]

ROOT = Path(__file__).resolve().parents[3]


def _start_consumer(env: dict[str, str], idle: float, log: Path) -> subprocess.Popen[bytes]:
    # Logs go to a file: a pipe nobody reads fills up and blocks the consumer mid-write.
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.faults.engine.recording_consumer", str(idle)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=out,
        )


SESSION_SECONDS = 10
"""The group session of both protocols (aiokafka's and the local broker's consumer protocol)."""


def _batches(log: Path) -> list[dict[str, Any]]:
    """The batch lines of the consumer's log."""
    return [
        json.loads(line)
        for line in log.read_text(errors="replace").splitlines()
        if line.startswith("{") and '"event": "batch"' in line
    ]


def _batch_sizes(log: Path) -> list[int]:
    """The records of each batch the consumer's log tells of."""
    return [int(batch["records"]) for batch in _batches(log)]


def _tail(log: Path, lines: int = 40) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


async def _execute(url: str, sql: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def _count(url: str, sql: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval(sql))
    finally:
        await conn.close()


async def _until_applied(url: str, at_least: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Wait until the consumer process has applied ``at_least`` events; fail after 60 s, or at
    once should it exit meanwhile."""

    async def applied() -> bool:
        assert proc.poll() is None, _tail(log)
        return await _applied(url, at_least)

    await eventually(applied, timeout=60, interval=0.05)


async def _assert_exactly_once(url: str, expected_keys: set[str]) -> None:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT idempotency_key, count(*) AS n FROM fault_effects GROUP BY 1"
        )
    finally:
        await conn.close()
    counts = {r["idempotency_key"]: r["n"] for r in rows}
    assert set(counts) == expected_keys
    doubled = {k: n for k, n in counts.items() if n != 1}
    assert not doubled, f"applied more than once: {list(doubled.items())[:5]}"


@pytest.fixture(params=transport_params("aiokafka", "confluent-consumer"))
def transported_env(request: pytest.FixtureRequest, spectral_env: dict[str, str]) -> dict[str, str]:
    """``spectral_env`` with each transport and group protocol (confluent's classic protocol in
    ``make test-slow``: its cooperative rebalances are the consumer protocol's code path)."""
    return {**spectral_env, **transport_env(request.param)}


@pytest.mark.parametrize(
    ("growth", "commit_interval"),
    [(1, 0.0), (4, 0.0), (1, 0.5)],
    ids=["one-fetch", "growth-4", "commits-every-half-second"],
)
async def test_sigkill_mid_stream_then_restart_gives_exactly_once(  # noqa: PLR0917 - fixtures
    database_url: str,
    kafka_bootstrap: str,
    topic_prefix: str,
    transported_env: dict[str, str],
    tmp_path: Path,
    growth: int,
    commit_interval: float,
) -> None:
    """Three SIGKILLs mid-stream, on each transport and group protocol, batches one fetch each
    or grown with the backlog (``batch_growth`` 4: up to 800 records of what the client holds,
    killed while a grown batch is in flight), offsets committed after each batch or every half
    second (``commit_interval``: a kill loses the offsets of the batches since the last
    commit, whose records the restarted member reads again and finds handled). Through the
    backlog the next batch is claimed beside the commit before it (the log says so), so kills
    land while two transactions are open."""
    spectral_env = {
        **transported_env,
        "FAULT_BATCH_GROWTH": str(growth),
        "FAULT_COMMIT_INTERVAL": str(commit_interval),
    }
    log = tmp_path / "consumer.log"
    await _execute(database_url, CREATE_TABLE)
    topic = topic_for(FAILURE_CLUSTER_DETECTED, topic_prefix)
    await create_topics(kafka_bootstrap, [topic], partitions=3)
    events = [cluster_event() for _ in range(3000)]
    duplicates = events[::10]  # 10% republished with the same idempotency key
    await publish_envelopes(kafka_bootstrap, topic, events + duplicates)
    expected = {e.idempotency_key for e in events}

    for kill in range(3):
        proc = _start_consumer(spectral_env, idle=30, log=log)
        deadline = time.monotonic() + 60
        threshold = (kill + 1) * 600
        while time.monotonic() < deadline:
            if await _count(database_url, "SELECT count(*) FROM fault_effects") >= threshold:
                break
            await asyncio.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    # The killed member keeps its partitions until its session expires (10 s). With the consumer
    # group protocol the restarted member joins at once with none of them, so its idle count
    # must outlast that session to see them handed over.
    final = _start_consumer(spectral_env, idle=SESSION_SECONDS + 3, log=log)
    assert final.wait(timeout=120) == 0, _tail(log)

    await _assert_exactly_once(database_url, expected)
    handled = await _count(
        database_url, "SELECT count(*) FROM core.event_handled WHERE consumer = 'fault-recorder'"
    )
    assert handled == len(expected)
    largest = max(_batch_sizes(log))
    assert (largest > 200) == (growth > 1), largest  # a grown batch took more than one fetch
    # Through the backlog batches were claimed beside the commit before them (the early claim):
    # the kills landed among them.
    assert any(batch["claimed_early"] for batch in _batches(log))
    assert await committed_offsets(
        kafka_bootstrap, topic_prefix + "fault-recorder", topic
    ) == await end_offsets(kafka_bootstrap, topic)
    assert await read_all(kafka_bootstrap, dlq_topic(topic)) == []


async def test_sigkill_between_a_database_commit_and_its_offsets_gives_exactly_once(
    database_url: str,
    kafka_bootstrap: str,
    topic_prefix: str,
    spectral_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """The window the overlap opens: batch N committed in the database, its offset commit
    under way, batch N+1's transaction running (first kill) or committed too (second kill)."""
    log, marker = tmp_path / "consumer.log", tmp_path / "held-offsets"
    await _execute(database_url, CREATE_TABLE)
    topic = topic_for(FAILURE_CLUSTER_DETECTED, topic_prefix)
    await create_topics(kafka_bootstrap, [topic], partitions=1)
    events = [cluster_event() for _ in range(1000)]
    await publish_envelopes(kafka_bootstrap, topic, events)
    group = topic_prefix + "fault-recorder"
    handled = "SELECT count(*) FROM core.event_handled WHERE consumer = 'fault-recorder'"
    in_transaction = (
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND state = 'idle in transaction'"
    )

    for hold in ("30", "0"):  # N+1's transaction held open; then let it commit
        marker.unlink(missing_ok=True)
        env = {**spectral_env, "FAULT_HOLD_COMMIT": str(marker), "FAULT_HOLD_NEXT_SECONDS": hold}
        proc = _start_consumer(env, idle=600, log=log)

        async def in_the_window(hold: str = hold) -> bool:
            if not marker.exists():
                return False
            if hold != "0":
                return await _count(database_url, in_transaction) > 0
            return await _count(database_url, handled) > int(marker.read_text())

        try:
            await eventually(in_the_window, timeout=60, interval=0.05)
            committed = await committed_offsets(kafka_bootstrap, group, topic)
            assert await _count(database_url, handled) > (committed[0] or 0)  # DB ahead
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    final = _start_consumer(spectral_env, idle=3, log=log)
    assert final.wait(timeout=120) == 0, _tail(log)
    await _assert_exactly_once(database_url, {e.idempotency_key for e in events})
    assert await _count(database_url, handled) == len(events)
    assert await committed_offsets(kafka_bootstrap, group, topic) == await end_offsets(
        kafka_bootstrap, topic
    )
    assert await read_all(kafka_bootstrap, dlq_topic(topic)) == []


@dataclass(frozen=True)
class Outage:
    """A server taken away under a running consumer for ``seconds``, then given back."""

    what: str
    stop: Callable[[], object]
    start: Callable[[], object]
    seconds: float
    # The consumer's --stop-when-idle, shorter than the outage: time while a server is away is
    # not idle time.
    idle: float


async def _consume_through(
    outage: Outage, *, bootstrap: str, database_url: str, env: dict[str, str], topic: str, log: Path
) -> None:
    """2,000 events, the outage once 300 are applied; then exactly once, no dead letter, offsets
    at the end."""
    await _execute(database_url, CREATE_TABLE)
    await create_topics(bootstrap, [topic], partitions=3)
    events = [cluster_event() for _ in range(2000)]
    await publish_envelopes(bootstrap, topic, events)

    proc = _start_consumer(env, idle=outage.idle, log=log)
    await _until_applied(database_url, 300, proc, log)
    outage.stop()
    await asyncio.sleep(outage.seconds)
    assert proc.poll() is None, f"the consumer must wait for the {outage.what}, not exit"
    outage.start()

    assert proc.wait(timeout=180) == 0, _tail(log)
    await _assert_exactly_once(database_url, {e.idempotency_key for e in events})
    assert await read_all(bootstrap, dlq_topic(topic)) == []
    group = env["SPECTRAL_TOPIC_PREFIX"] + "fault-recorder"
    assert await committed_offsets(bootstrap, group, topic) == await end_offsets(bootstrap, topic)


async def test_postgres_stopped_mid_stream_loses_nothing_and_dead_letters_nothing(
    kafka_bootstrap: str, topic_prefix: str, spectral_env: dict[str, str], tmp_path: Path
) -> None:
    # A private server, so stopping it disturbs no other test.
    server = LocalPostgres(tmp_path / "pg")
    url = server.ensure_running()
    try:
        await migrate(url)
        await _consume_through(
            Outage("database", server.stop, server.start, seconds=20, idle=3),
            bootstrap=kafka_bootstrap,
            database_url=url,
            env={**spectral_env, "SPECTRAL_DATABASE_URL": url},
            topic=topic_for(FAILURE_CLUSTER_DETECTED, topic_prefix),
            log=tmp_path / "consumer.log",
        )
    finally:
        server.stop(wipe=True)


@pytest.fixture(scope="module")
def _module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    broker = LocalKafka(
        tmp_path_factory.mktemp("outage-kafka"), default_cache_dir(), short_lived=True
    )
    try:
        yield broker
    finally:
        broker.stop(wipe=True)


@pytest.fixture
def outage_broker(_module_broker: LocalKafka) -> LocalKafka:
    """A broker of this module's own (same jar cache), so stopping it disturbs no other test.
    Its broker-outage tests share it (one xdist group, tests/conftest.py): each stops and starts
    it for real, on topics and a group of its own, and gets it running whatever the test before
    left (a start costs seconds of CPU; this saves one storage format and one start a test)."""
    _module_broker.ensure_running()
    return _module_broker


@pytest.mark.parametrize("transport", transport_params("aiokafka"))
async def test_broker_stopped_mid_stream_loses_nothing_and_dead_letters_nothing(  # noqa: PLR0917 - fixtures
    database_url: str,
    topic_prefix: str,
    spectral_env: dict[str, str],
    tmp_path: Path,
    transport: str,
    outage_broker: LocalKafka,
) -> None:
    spectral_env = {**spectral_env, **transport_env(transport)}
    broker = outage_broker
    bootstrap = broker.ensure_running()
    await _consume_through(
        Outage("broker", broker.stop, broker.start, seconds=10, idle=3),
        bootstrap=bootstrap,
        database_url=database_url,
        env={**spectral_env, "SPECTRAL_KAFKA_BOOTSTRAP": bootstrap},
        topic=topic_for(FAILURE_CLUSTER_DETECTED, topic_prefix),
        log=tmp_path / "consumer.log",
    )


@pytest.mark.parametrize("transport", transport_params("aiokafka"))
async def test_a_broker_stopped_while_the_consumer_is_idle_is_an_outage_not_idleness(  # noqa: PLR0917 - fixtures
    database_url: str,
    topic_prefix: str,
    spectral_env: dict[str, str],
    tmp_path: Path,
    transport: str,
    outage_broker: LocalKafka,
) -> None:
    """Caught up, nothing in flight, then the broker goes away for longer than
    --stop-when-idle: only the idle probe (its partitions' end offsets) can tell an outage from
    a quiet topic, so it must find the broker unreachable and keep the consumer waiting. The idle
    count starts again once the broker answers, so the records published as soon as it is back
    are applied before the consumer stops (it stopped a second after the broker returned when
    the count ran from the last failed probe). Each transport probes with its own client."""
    spectral_env = {**spectral_env, **transport_env(transport)}
    broker = outage_broker
    bootstrap = broker.ensure_running()
    log = tmp_path / "consumer.log"
    await _execute(database_url, CREATE_TABLE)
    topic = topic_for(FAILURE_CLUSTER_DETECTED, topic_prefix)
    await create_topics(bootstrap, [topic], partitions=3)
    before = [cluster_event() for _ in range(100)]
    await publish_envelopes(bootstrap, topic, before)
    proc = _start_consumer({**spectral_env, "SPECTRAL_KAFKA_BOOTSTRAP": bootstrap}, 4, log)
    await _until_applied(database_url, len(before), proc, log)
    await asyncio.sleep(1.0)  # its offsets committed: nothing in flight, only the probe
    broker.stop()
    await asyncio.sleep(14)  # longer than an idle period and a probe, twice
    assert proc.poll() is None, f"the consumer took the outage for idleness: {_tail(log)}"
    broker.start()
    after = [cluster_event() for _ in range(100)]
    await publish_envelopes(bootstrap, topic, after)
    assert proc.wait(timeout=120) == 0, _tail(log)
    await _assert_exactly_once(database_url, {e.idempotency_key for e in before + after})
    text = log.read_text()
    assert "idle time not counted: unreachable" in text
    assert "idle time counted again: reachable" in text


async def test_sigterm_commits_leaves_the_group_and_exits_zero(
    settings: Settings,
    database_url: str,
    kafka_bootstrap: str,
    transported_env: dict[str, str],
    tmp_path: Path,
) -> None:
    spectral_env = transported_env
    log = tmp_path / "consumer.log"
    await _execute(database_url, CREATE_TABLE)
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await create_topics(kafka_bootstrap, [topic], partitions=3)
    events = [cluster_event() for _ in range(500)]
    await publish_envelopes(kafka_bootstrap, topic, events)

    proc = _start_consumer(spectral_env, idle=600, log=log)
    await _until_applied(database_url, len(events), proc, log)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, _tail(log)

    await _assert_exactly_once(database_url, {e.idempotency_key for e in events})
    group_name = settings.topic_prefix + "fault-recorder"
    assert await committed_offsets(kafka_bootstrap, group_name, topic) == await end_offsets(
        kafka_bootstrap, topic
    )
    group = await describe_group(settings, kafka_bootstrap, group_name)
    assert group.members == (), "the consumer left its group on SIGTERM"


async def test_a_database_outage_is_not_idle_time(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    """--stop-when-idle counts only time with nothing fetched while healthy: a batch retrying
    through an outage longer than the idle time is not idleness, and what arrived meanwhile is
    applied once the database is back (the engine used to exit 0 with it unread)."""
    server = LocalPostgres(tmp_path / "pg")
    url = server.ensure_running()
    try:
        await migrate(url)
        await _execute(url, CREATE_TABLE)
        current = load_settings(
            kafka_bootstrap=kafka_bootstrap, database_url=url, topic_prefix=topic_prefix
        )
        topic = topic_for(FAILURE_CLUSTER_DETECTED, current.topic_prefix)
        await create_topics(kafka_bootstrap, [topic], partitions=1)
        registry = CollectorRegistry()
        engine = ConsumerEngine(
            AppendingHandler(),
            current,
            kafka_bootstrap=kafka_bootstrap,
            database_url=url,
            options=EngineOptions(stop_when_idle=2, backoff=Backoff(base=0.2, cap=1.0)),
            registry=registry,
        )
        run = asyncio.create_task(engine.run())
        warm, during, late = cluster_event(), cluster_event(), cluster_event()
        await publish_envelopes(kafka_bootstrap, topic, [warm])
        await eventually(lambda: _applied(url, 1), timeout=60)

        server.stop()
        # Nothing in flight, nothing arrives, the database is away: more than the idle time.
        await asyncio.sleep(3.5)
        assert not run.done(), "an outage with nothing to apply is not idleness either"
        await publish_envelopes(kafka_bootstrap, topic, [during])
        # Its batch is in flight, retrying: then more than the idle time passes.
        await eventually(lambda: _retried(registry), timeout=30)
        await asyncio.sleep(2.5)
        assert not run.done(), "the consumer must wait for the database, not stop as idle"
        await publish_envelopes(kafka_bootstrap, topic, [late])
        server.start()
        await asyncio.wait_for(run, timeout=90)
        await _assert_exactly_once(url, {e.idempotency_key for e in (warm, during, late)})
    finally:
        server.stop(wipe=True)


async def _applied(url: str, n: int) -> bool:
    return await _count(url, "SELECT count(*) FROM fault_effects") >= n


async def _retried(registry: CollectorRegistry) -> bool:
    value = registry.get_sample_value(
        "spectral_consumer_infrastructure_retries_total",
        {"consumer": "fault-recorder", "component": "database"},
    )
    return bool(value)


async def _trickle(
    bootstrap: str, topic: str, events: list[Any], per_round: int, pause: float
) -> None:
    """Publish ``events`` ``per_round`` at a time, ``pause`` seconds apart (small fetches)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        for at in range(0, len(events), per_round):
            sent = [
                await producer.send(topic, value=encode(e), key=str(e.payload.cluster_id).encode())
                for e in events[at : at + per_round]
            ]
            await asyncio.gather(*sent)
            await asyncio.sleep(pause)
    finally:
        await producer.stop()


def _assignments(log: Path) -> int:
    if not log.exists():
        return 0
    return log.read_text(errors="replace").count('"partitions assigned"')


def _most_fetches_joined(log: Path) -> int:
    """The most fetches one batch's transaction took (its log line's ``fetches``)."""
    joined = [0]
    for line in log.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if isinstance(entry, dict) and entry.get("event") == "batch":
                joined.append(int(entry["fetches"]))
    return max(joined)


@pytest.mark.slow  # ~55 s; test_joined_batches and the memory engine's crash property hold joins
async def test_sigkill_while_batches_are_joined_behind_a_slow_transaction_gives_exactly_once(
    database_url: str,
    kafka_bootstrap: str,
    topic_prefix: str,
    spectral_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """Records arrive five at a time while each transaction is held open 0.3 s: the fetches
    behind it join one batch (the log shows batches of several fetches). SIGKILLs land while a
    joined batch waits, runs or awaits its offsets; a last consumer then gives exactly once, the
    offsets at the end and no dead letter."""
    log = tmp_path / "consumer.log"
    await _execute(database_url, CREATE_TABLE)
    topic = topic_for(FAILURE_CLUSTER_DETECTED, topic_prefix)
    await create_topics(kafka_bootstrap, [topic], partitions=2)
    events = [cluster_event() for _ in range(900)]
    group = topic_prefix + "fault-recorder"
    env = {**spectral_env, "FAULT_HOLD_SECONDS": "0.3"}
    for kill, share in enumerate((slice(0, 300), slice(300, 600))):
        seen = _assignments(log)
        proc = _start_consumer(env, idle=600, log=log)
        try:

            async def assigned(seen: int = seen, proc: subprocess.Popen[bytes] = proc) -> bool:
                assert proc.poll() is None, _tail(log)
                return _assignments(log) > seen

            # After a SIGKILL the group waits for the killed member's session (10 s).
            await eventually(assigned, timeout=60, interval=0.05)
            await _trickle(kafka_bootstrap, topic, events[share], per_round=5, pause=0.02)
            await asyncio.sleep(0.1 * kill)  # the second kill later in its transaction
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    assert _most_fetches_joined(log) > 1, "no fetch joined a batch behind a held transaction"
    await publish_envelopes(kafka_bootstrap, topic, events[600:])

    final = _start_consumer(spectral_env, idle=SESSION_SECONDS + 3, log=log)
    assert final.wait(timeout=120) == 0, _tail(log)
    await _assert_exactly_once(database_url, {e.idempotency_key for e in events})
    assert await committed_offsets(kafka_bootstrap, group, topic) == await end_offsets(
        kafka_bootstrap, topic
    )
    assert await read_all(kafka_bootstrap, dlq_topic(topic)) == []
