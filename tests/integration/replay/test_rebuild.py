"""`spectral rebuild rule-candidates`: snapshots rebuilt from the topic, operator columns kept."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from consumers.rule_candidates.handler import Counts, RuleCandidatesHandler
from consumers.rule_candidates.metrics import RuleCandidateMetrics
from contracts import FAILURE_CLUSTER_DETECTED
from spectral.db.connect import Conn
from spectral.engine.handler import Delivery, HandlerResult, Outcome
from spectral.kafka.topics import topic_for
from spectral.replay.offsets import GroupBusyError
from spectral.replay.rebuild import rebuild
from spectral.settings import Settings
from tests.integration.replay.support import (
    T0,
    endpoints,
    execute,
    fetchval,
    history_of_clusters,
    live_member,
    rule_candidates,
    run_live,
    spectral_cli,
    spectral_json,
)
from tests.kafka_support import create_topics, publish_envelopes

pytestmark = pytest.mark.integration

CONSUMER = "rule-candidates"
SNAPSHOT = (
    "cluster_id, snapshot_hash, rule_id, workspace_id, severity, failure_count, "
    "first_observed_at, last_observed_at, evidence_bundle::text, suggested_rule_stub"
)
KEPT = (
    "cluster_id, status, assigned_to, notes, deleted_at, status_changed_at, created_at, "
    "last_signaled_at, resurfaced_at"
)


async def _rows(database_url: str, columns: str) -> dict[uuid.UUID, tuple[Any, ...]]:
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(f"SELECT {columns} FROM platform.rule_candidates_pending")
    finally:
        await conn.close()
    return {r["cluster_id"]: tuple(r) for r in rows}


async def _as_operator(database_url: str, sql: str, *args: Any) -> None:
    conn = await asyncpg.connect(database_url, server_settings={"role": "spectral_operator"})
    try:
        await conn.execute(sql, *args)
    finally:
        await conn.close()


async def _signal_hours(database_url: str) -> set[tuple[Any, ...]]:
    conn = await asyncpg.connect(database_url)
    try:
        return {tuple(r) for r in await conn.fetch("SELECT * FROM platform.cluster_signal_hours")}
    finally:
        await conn.close()


async def test_a_rebuild_restores_snapshots_and_keeps_every_operator_column(
    settings: Settings, kafka_bootstrap: str, database_url: str, spectral_env: dict[str, str]
) -> None:
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await create_topics(kafka_bootstrap, [topic], partitions=3)
    clusters = [uuid.uuid4() for _ in range(8)]
    await publish_envelopes(kafka_bootstrap, topic, history_of_clusters(clusters, versions=4))
    await run_live(settings, rule_candidates(settings)(""))
    truth = await _rows(database_url, SNAPSHOT)  # what consuming the topic gives
    dismissed, reviewed, deleted, corrupted, behind, lost = clusters[:6]

    # Operators triage (only they can write these columns) ...
    await _as_operator(
        database_url,
        "UPDATE platform.rule_candidates_pending SET status = 'dismissed', assigned_to = $2, "
        "notes = 'noise, see ticket 42' WHERE cluster_id = $1",
        dismissed,
        uuid.UUID(int=7),
    )
    await _as_operator(
        database_url,
        "UPDATE platform.rule_candidates_pending SET status = 'in_review', notes = 'looking' "
        "WHERE cluster_id = $1",
        reviewed,
    )
    await _as_operator(
        database_url,
        "UPDATE platform.rule_candidates_pending SET deleted_at = now() WHERE cluster_id = $1",
        deleted,
    )
    # ... and the projection goes wrong: a row with garbage, a row behind the topic, a lost
    # row, and a row whose cluster is no longer in the topic (past its retention).
    await execute(
        database_url,
        "UPDATE platform.rule_candidates_pending SET failure_count = 999, "
        "evidence_bundle = '[]' WHERE cluster_id = $1",
        corrupted,
    )
    await execute(
        database_url,
        "UPDATE platform.rule_candidates_pending SET last_observed_at = $2, snapshot_hash = 'x' "
        "WHERE cluster_id = $1",
        behind,
        T0,
    )
    await execute(
        database_url, "DELETE FROM platform.rule_candidates_pending WHERE cluster_id = $1", lost
    )
    expired = uuid.uuid4()
    await execute(
        database_url,
        "INSERT INTO platform.rule_candidates_pending (cluster_id, snapshot_hash, rule_id, "
        "workspace_id, severity, failure_count, first_observed_at, last_observed_at, "
        "evidence_bundle, status, notes) "
        "VALUES ($1, 'h', $2, $2, 'low', 1, $3, $3, '[]', 'resolved', 'old one')",
        expired,
        uuid.UUID(int=1),
        T0 - timedelta(days=400),
    )
    before_snapshots = await _rows(database_url, SNAPSHOT)
    kept = await _rows(database_url, KEPT)
    signals = await _signal_hours(database_url)
    bootstrap, url = endpoints(settings)

    # Refused while the live consumer is in its group.
    async with live_member(settings):
        with pytest.raises(GroupBusyError, match="active member"):
            await rebuild(
                rule_candidates(settings), settings, kafka_bootstrap=bootstrap, database_url=url
            )

    # A dry run (through the CLI) reports the diff and changes nothing.
    dry = await asyncio.to_thread(
        spectral_json, spectral_env, "rebuild", "rule-candidates", "--dry-run", "--json"
    )
    # A deployment whose handler gives no Rebuild is refused as configuration, naming why.
    refused = await asyncio.to_thread(spectral_cli, spectral_env, "rebuild", "work-executor")
    assert refused.returncode == 2
    assert "'work-executor' cannot be rebuilt: its handler gives no Rebuild" in refused.stderr
    assert dry["committed"] is False
    assert dry["complete"] is True
    assert dry["rebuild"] == {
        "rows": 9,
        "inserted": 1,
        "changed": 2,
        "unchanged": 6,
        "kept_not_in_topic": 1,
    }
    assert await _rows(database_url, SNAPSHOT) == before_snapshots
    assert await _rows(database_url, KEPT) == kept

    report = await rebuild(
        rule_candidates(settings), settings, kafka_bootstrap=bootstrap, database_url=url
    )

    assert report.complete
    assert report.committed
    assert report.counts[Outcome.DEAD_LETTERED] == 0
    after = await _rows(database_url, SNAPSHOT)
    # Every cluster of the topic has its newest snapshot again; the expired one kept its own.
    assert {k: v for k, v in after.items() if k != expired} == truth
    assert after[expired] == before_snapshots[expired]
    # Operator columns, and the lifecycle the topic does not know, are exactly as they were
    # (the lost row comes back as a new, pending row: its triage state went with it).
    now_kept = await _rows(database_url, KEPT)
    assert {k: v for k, v in now_kept.items() if k != lost} == kept
    assert now_kept[lost][1:5] == ("pending", None, None, None)
    assert await _signal_hours(database_url) == signals
    # The dedup record holds every key of the topic again: the live group, restarted from
    # scratch, applies nothing twice.
    again = await run_live(settings, rule_candidates(settings)(""), group="after-rebuild")
    assert again.counts[Outcome.DEDUPLICATED] == 32
    assert again.counts[Outcome.APPLIED] == again.counts[Outcome.STALE] == 0


class _InterruptedHandler(RuleCandidatesHandler):
    """The real handler; its second batch raises SIGINT, as a person pressing Ctrl-C would
    (the engine's signal handler asks the run to stop after the batch in hand)."""

    def __init__(self) -> None:
        super().__init__(RuleCandidateMetrics(CollectorRegistry()))
        self.batches = 0

    async def apply(self, conn: Conn, deliveries: Sequence[Delivery]) -> HandlerResult[Counts]:
        self.batches += 1
        if self.batches == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return await super().apply(conn, deliveries)


async def test_an_interrupted_rebuild_changes_nothing(
    settings: Settings, kafka_bootstrap: str, database_url: str
) -> None:
    """Interrupted mid-rebuild: the range was not read to its end, so the one transaction rolls
    back — projection and dedup record exactly as they were."""
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await create_topics(kafka_bootstrap, [topic], partitions=1)
    await publish_envelopes(
        kafka_bootstrap, topic, history_of_clusters([uuid.uuid4() for _ in range(50)], 4)
    )
    await run_live(settings, rule_candidates(settings)(""))
    await execute(database_url, "UPDATE platform.rule_candidates_pending SET failure_count = 12345")
    before = await _rows(database_url, SNAPSHOT)
    handled_before = await fetchval(database_url, "SELECT count(*) FROM core.event_handled")
    bootstrap, url = endpoints(settings)
    handler = _InterruptedHandler()

    report = await rebuild(
        lambda _url: handler, settings, kafka_bootstrap=bootstrap, database_url=url, max_batch=10
    )

    assert handler.batches >= 2
    assert not report.complete
    assert not report.committed
    assert 0 < report.records < 200
    assert await _rows(database_url, SNAPSHOT) == before
    assert await fetchval(database_url, "SELECT count(*) FROM core.event_handled") == handled_before
