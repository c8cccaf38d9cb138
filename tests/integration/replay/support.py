"""Running the real pieces for the replay, dead-letter and rebuild tests."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg
from prometheus_client import CollectorRegistry

from consumers.rule_candidates.deployment import build as build_rule_candidates
from contracts import EventEnvelope
from spectral.engine.engine import ConsumerEngine, EngineOptions, RunSummary
from spectral.engine.handler import Handler
from spectral.kafka.groups import describe_group
from spectral.kafka.topics import group_for
from spectral.replay.replay import ReplayReport, ReplayRequest, TransactionHooks, replay
from spectral.settings import Settings
from tests.kafka_support import cluster_event
from tests.support import eventually, spectral_in_process

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
SPECTRAL = str(Path(sys.executable).with_name("spectral"))

PROJECTION_CHECKSUM = """
SELECT count(*) AS n, md5(coalesce(string_agg(t::text, '|' ORDER BY cluster_id), '')) AS md5
FROM platform.rule_candidates_pending AS t
"""


def endpoints(settings: Settings) -> tuple[str, str]:
    assert settings.kafka_bootstrap is not None
    assert settings.database_url is not None
    return settings.kafka_bootstrap, settings.database_url.get_secret_value()


def rule_candidates(settings: Settings) -> Callable[[str], Handler[Any]]:
    return lambda url: build_rule_candidates(settings, url, CollectorRegistry())


async def run_live(
    settings: Settings, handler: Handler[Any], group: str | None = None, idle: float = 2.0
) -> RunSummary:
    """The live consumer (its own group, committing), until idle: ``idle`` seconds with nothing
    fetched once it has joined and read its partitions to the end offsets it finds (the
    engine checks them before it counts the time as idle), so a run over records written
    before it began needs no longer wait."""
    bootstrap, url = endpoints(settings)
    return await ConsumerEngine(
        handler,
        settings,
        kafka_bootstrap=bootstrap,
        database_url=url,
        options=EngineOptions(group=group, stop_when_idle=idle, max_batch=50),
        registry=CollectorRegistry(),
    ).run()


@asynccontextmanager
async def live_member(settings: Settings) -> AsyncIterator[None]:
    """The live rule-candidates consumer, joined to its group, for the body of the block."""
    bootstrap, url = endpoints(settings)
    handler = rule_candidates(settings)(url)
    live = ConsumerEngine(
        handler,
        settings,
        kafka_bootstrap=bootstrap,
        database_url=url,
        options=EngineOptions(),
        registry=CollectorRegistry(),
    )
    task = asyncio.create_task(live.run())
    try:

        async def joined() -> bool:
            # Stable: the join completed (a member stopped while its join is still pending
            # leaves no LeaveGroup behind and lingers until its session times out).
            group = group_for(handler.name, settings.topic_prefix)
            state = await describe_group(settings, bootstrap, group)
            return state.active and state.state == "Stable"

        await eventually(joined)
        yield
    finally:
        live.stop()
        await asyncio.wait_for(task, timeout=30)


async def run_replay(
    settings: Settings,
    make_handler: Callable[[str], Handler[Any]],
    request: ReplayRequest,
    hooks: TransactionHooks | None = None,
) -> ReplayReport:
    bootstrap, url = endpoints(settings)
    return await replay(
        make_handler,
        settings,
        kafka_bootstrap=bootstrap,
        database_url=url,
        request=request,
        hooks=hooks,
    )


OWN_PROCESS = {"consume"}
"""Commands run as a process of their own even here: a consumer registers its metrics in the
process's registry (a second run in one process would register them twice)."""


def spectral_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`spectral ARGS` with ``env``, its console script's entry point run in this process
    (:func:`tests.support.spectral_in_process`) but for :data:`OWN_PROCESS`; the caller checks
    the exit code."""
    if args[0] in OWN_PROCESS:
        return subprocess.run(
            [SPECTRAL, *args], env=env, capture_output=True, text=True, timeout=120, check=False
        )
    return spectral_in_process(env, *args)


def spectral_ok(env: dict[str, str], *args: str) -> str:
    """The standard output of `spectral ARGS`, which must exit 0."""
    result = spectral_cli(env, *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def spectral_json(env: dict[str, str], *args: str) -> Any:
    """The parsed JSON output of `spectral ARGS`, which must exit 0."""
    return json.loads(spectral_ok(env, *args))


async def fetchval(database_url: str, sql: str, *args: Any) -> Any:
    conn = await asyncpg.connect(database_url)
    try:
        return await conn.fetchval(sql, *args)
    finally:
        await conn.close()


async def execute(database_url: str, sql: str, *args: Any) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(sql, *args)
    finally:
        await conn.close()


async def projection(database_url: str) -> tuple[int, str]:
    """Row count and an md5 over every column of every row of the triage inbox."""
    conn = await asyncpg.connect(database_url)
    try:
        row = await conn.fetchrow(PROJECTION_CHECKSUM)
    finally:
        await conn.close()
    assert row is not None
    return row["n"], row["md5"]


async def handled(database_url: str, consumer: str) -> list[tuple[str, str]]:
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT idempotency_key, outcome FROM core.event_handled_keys WHERE consumer = $1 "
            "ORDER BY idempotency_key",
            consumer,
        )
    finally:
        await conn.close()
    return [(r["idempotency_key"], r["outcome"]) for r in rows]


def history_of_clusters(clusters: list[UUID], versions: int) -> list[EventEnvelope[Any]]:
    """``versions`` snapshots of each cluster, growing, interleaved across clusters."""
    return [
        cluster_event(
            cid,
            failure_count=2 + v,
            last_observed_at=T0 + timedelta(minutes=10 * v),
            severity=("low", "medium", "high")[v % 3],
        )
        for v in range(versions)
        for cid in clusters
    ]
