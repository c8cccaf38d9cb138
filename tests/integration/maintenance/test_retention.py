"""Retention of the tables that grow with traffic, against the real database (and broker, for
the redrive record), acting as spectral_maintainer: what is past its horizon goes, nothing else;
a dry run deletes nothing; pruning ingested failures never changes a cluster's snapshot."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from producers.clusters import ClusterPolicy
from producers.clusters.evidence import select_evidence
from producers.clusters.model import FailureObservation
from producers.clusters.repository import ClusterRepository
from producers.clusters.retention import FailureRetention
from producers.clusters.severity import Criticality, SeverityPolicy
from producers.clusters.snapshot import build_snapshot
from producers.work.plugin import WORK_READ
from spectral.auth.tokens import TOKEN_ADMIN_ROLE, TokenAdmin
from spectral.db.connect import connect
from spectral.kafka.retention import describe_retention
from spectral.maintenance.metrics import MaintenanceMetrics
from spectral.maintenance.repository import MaintenanceRepository
from spectral.maintenance.retention import DeadLetterTable, Measured, Redrives, Tokens
from spectral.maintenance.run import MaintenanceOptions, MaintenanceReport, maintain
from spectral.settings import Settings
from tests.integration.maintenance.support import session
from tests.kafka_support import create_topics

pytestmark = pytest.mark.integration

DAY = timedelta(days=1)


async def _pass(
    settings: Settings,
    database_url: str,
    tasks: Sequence[object],
    *,
    dry_run: bool = False,
    registry: CollectorRegistry | None = None,
) -> MaintenanceReport:
    repo = await MaintenanceRepository.open(database_url)
    try:
        return await maintain(
            repo,
            {},
            lambda topics: describe_retention(settings, settings.kafka_bootstrap or "", topics),
            MaintenanceOptions(dry_run=dry_run, grace=timedelta(seconds=1)),
            MaintenanceMetrics(registry) if registry is not None else None,
            retention=tasks,  # type: ignore[arg-type]
        )
    finally:
        await repo.close()


def _pruned(report: MaintenanceReport, table: str) -> int:
    assert not report.retention_errors, report.retention_errors
    (found,) = [p for p in report.retention if p.table == table]
    return found.rows


async def _dead_letter(conn: asyncpg.Connection, offset: int, recorded_at: datetime) -> None:
    await conn.execute(
        "INSERT INTO core.dead_letters (consumer, source_topic, source_partition, source_offset,"
        " reason, detail, refusal, failed_at, record_key, key_size, value_head, value_size,"
        " value_sha256, headers, header_count, history, recorded_at)"
        " VALUES ('c', 't', 0, $1, 'not_json', 'd', 'r', $2, NULL, 0, '', 0, '',"
        " '[]', 0, '[]', $2)",
        offset,
        recorded_at,
    )


async def test_dead_letters_of_the_table_go_after_their_horizon(
    settings: Settings, database_url: str
) -> None:
    now = datetime.now(UTC)
    async with session(database_url) as owner:
        for offset, age in enumerate((40 * DAY, 31 * DAY, 29 * DAY, timedelta(0))):
            await _dead_letter(owner, offset, now - age)
    tasks = [DeadLetterTable(30 * DAY)]
    dry = await _pass(settings, database_url, tasks, dry_run=True)
    assert _pruned(dry, "core.dead_letters") == 2
    registry = CollectorRegistry()
    done = await _pass(settings, database_url, tasks, registry=registry)
    assert _pruned(done, "core.dead_letters") == 2
    async with session(database_url) as owner:
        kept = await owner.fetch("SELECT source_offset FROM core.dead_letters ORDER BY 1")
    assert [r[0] for r in kept] == [2, 3]
    assert (
        registry.get_sample_value(
            "spectral_retention_pruned_rows_total", {"table": "core.dead_letters"}
        )
        == 2
    )
    assert (
        registry.get_sample_value(
            "spectral_retention_horizon_seconds", {"table": "core.dead_letters"}
        )
        == (30 * DAY).total_seconds()
    )
    # Kept for ever when the dead-letter topics keep their records for ever.
    forever = await _pass(settings, database_url, [DeadLetterTable(None)])
    assert forever.retention[0].held is not None
    assert forever.retention[0].rows == 0


async def test_tokens_revoked_or_expired_long_ago_go(settings: Settings, database_url: str) -> None:
    conn = await connect(database_url, role=TOKEN_ADMIN_ROLE)
    try:
        admin = TokenAdmin(conn)
        for name in ("live", "revoked-long-ago", "revoked-lately", "expired-long-ago", "expiring"):
            await admin.create(name, [WORK_READ])
    finally:
        await conn.close()
    async with session(database_url) as owner:
        await owner.execute(
            "UPDATE core.api_tokens SET revoked_at = now() - interval '100 days'"
            " WHERE name = 'revoked-long-ago';"
            "UPDATE core.api_tokens SET revoked_at = now() - interval '1 day'"
            " WHERE name = 'revoked-lately';"
            "UPDATE core.api_tokens SET expires_at = now() - interval '95 days'"
            " WHERE name = 'expired-long-ago';"
            "UPDATE core.api_tokens SET expires_at = now() + interval '1 day'"
            " WHERE name = 'expiring'"
        )
    done = await _pass(settings, database_url, [Tokens(90 * DAY)])
    assert _pruned(done, "core.api_tokens") == 2
    async with session(database_url) as owner:
        names = {r[0] for r in await owner.fetch("SELECT name FROM core.api_tokens")}
    assert names == {"live", "revoked-lately", "expiring"}


async def test_redrive_records_go_once_neither_copy_can_be_read(
    settings: Settings, database_url: str, kafka_bootstrap: str
) -> None:
    prefix = settings.topic_prefix
    short, forever = f"{prefix}short", f"{prefix}forever"
    await create_topics(kafka_bootstrap, [short, f"{short}.dlq"], configs={"retention.ms": "60000"})
    await create_topics(
        kafka_bootstrap, [forever, f"{forever}.dlq"], configs={"retention.ms": "-1"}
    )
    async with session(database_url) as owner:
        for n, (source, redriven) in enumerate(
            [(short, 30 * DAY), (short, timedelta(0)), (forever, 30 * DAY)]
        ):
            await owner.execute(
                "INSERT INTO core.dlq_redrives (dlq_topic, dlq_partition, dlq_offset, reason,"
                " source_topic, redriven_at) VALUES ($1, 0, $2, 'r', $3, now() - $4::interval)",
                f"{source}.dlq",
                n,
                source,
                redriven,
            )
    done = await _pass(
        settings,
        database_url,
        [
            Redrives(
                lambda topics: describe_retention(settings, kafka_bootstrap, topics),
                timedelta(seconds=1),
            )
        ],
    )
    assert _pruned(done, "core.dlq_redrives") == 1
    assert "keep records for ever" in (done.retention[0].held or "")
    async with session(database_url) as owner:
        left = await owner.fetch("SELECT dlq_topic, dlq_offset FROM core.dlq_redrives ORDER BY 2")
    assert [(r[0], r[1]) for r in left] == [(f"{short}.dlq", 1), (f"{forever}.dlq", 2)]


async def test_tables_kept_by_design_are_measured_not_pruned(
    settings: Settings, database_url: str
) -> None:
    registry = CollectorRegistry()
    done = await _pass(settings, database_url, [Measured("work.ledger_entries")], registry=registry)
    assert done.retention[0].held == "kept by design"
    assert [s.table for s in done.table_sizes] == ["work.ledger_entries"]
    assert registry.get_sample_value("spectral_table_bytes", {"table": "work.ledger_entries"})


# -- failures --------------------------------------------------------------------------------

POLICY = ClusterPolicy(
    severity=SeverityPolicy(rate_window=timedelta(hours=1)),
    evidence_limit=3,
    failure_retention=DAY,
)
T0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)


async def _snapshots(database_url: str) -> dict[uuid.UUID, str]:
    """Every cluster's snapshot hash as a tick would build it now."""
    async with session(database_url) as owner:
        ids = [r[0] for r in await owner.fetch("SELECT cluster_id FROM clusters.clusters")]
    async with ClusterRepository.open(database_url) as repo, repo.unit() as unit:
        facts = await unit.facts(ids, Criticality.NORMAL, POLICY.severity.rate_window)
        candidates = await unit.evidence(ids, POLICY.evidence_limit)
    return {
        f.cluster_id: build_snapshot(
            f,
            select_evidence(candidates.get(f.cluster_id, ()), POLICY.evidence_limit),
            POLICY.severity,
        ).payload.snapshot_hash
        for f in facts
    }


async def _ingest(database_url: str, failures: Sequence[tuple[str, int, int, str, int]]) -> None:
    """(failure_id, cluster n, minutes after T0 observed, summary, days ago recorded)."""
    async with ClusterRepository.open(database_url) as repo:
        await repo.ingest(
            [
                FailureObservation(
                    failure_id=failure_id,
                    rule_id=uuid.UUID(int=0xA11CE << 100 | cluster),
                    workspace_id=uuid.UUID(int=7),
                    observed_at=T0 + timedelta(minutes=minutes),
                    summary=summary,
                    signature=f"sig-{cluster}",
                )
                for failure_id, cluster, minutes, summary, _ in failures
            ]
        )
    async with session(database_url) as owner:
        await owner.executemany(
            "UPDATE clusters.failures SET ingested_at = now() - make_interval(days => $2)"
            " WHERE failure_id = $1",
            [(failure_id, days) for failure_id, _, _, _, days in failures],
        )


failure_sets = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=2),  # cluster
        st.integers(min_value=0, max_value=600),  # minutes after T0 observed (10 h of spread)
        st.sampled_from(["timeout", "refused", "reset", "dns"]),  # summary
        st.sampled_from([0, 0, 3, 10]),  # days ago recorded (the retention is one day)
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(first=failure_sets, later=failure_sets)
def test_pruning_failures_never_changes_a_snapshot(
    settings: Settings,
    database_url: str,
    first: list[tuple[int, int, str, int]],
    later: list[tuple[int, int, str, int]],
) -> None:
    """Whatever the failures (observation order unrelated to recording order, repeated
    summaries, ties), a prune — and a later ingest, and another prune — leaves every cluster's
    snapshot hash as it would be had nothing been pruned."""

    async def scenario() -> None:
        async with session(database_url) as owner:
            await owner.execute(
                "TRUNCATE clusters.failures, clusters.pruned_summaries, clusters.clusters CASCADE"
            )
        task = FailureRetention(POLICY, every=timedelta(0))
        for batch, rows in enumerate((first, later)):
            await _ingest(
                database_url,
                [(f"f{batch}-{n}", c, m, s, d) for n, (c, m, s, d) in enumerate(rows)],
            )
            before = await _snapshots(database_url)
            report = await _pass(settings, database_url, [task])
            assert await _snapshots(database_url) == before
            again = await _pass(settings, database_url, [task])
            assert _pruned(again, "clusters.failures") == 0  # nothing more is due
            async with session(database_url) as owner:
                left = await owner.fetchval("SELECT count(*) FROM clusters.failures")
                rolled = await owner.fetchval(
                    "SELECT coalesce(sum(pruned_failures), 0) FROM clusters.clusters"
                )
            total = len(first) + (len(later) if batch else 0)
            assert left + rolled == total
            assert rolled >= _pruned(report, "clusters.failures")

    asyncio.run(scenario())


async def test_old_failures_leave_and_the_protected_ones_stay(
    settings: Settings, database_url: str
) -> None:
    # One cluster: 10 failures recorded 10 days ago, observed hours apart; 1 recorded now.
    old = [(f"old-{n}", 0, n * 120, "timeout" if n % 2 else "refused", 10) for n in range(10)]
    await _ingest(database_url, [*old, ("new", 0, 10 * 120, "timeout", 0)])
    before = await _snapshots(database_url)
    dry = await _pass(settings, database_url, [FailureRetention(POLICY)], dry_run=True)
    done = await _pass(settings, database_url, [FailureRetention(POLICY)])
    assert _pruned(dry, "clusters.failures") == _pruned(done, "clusters.failures")
    async with session(database_url) as owner:
        kept = {r[0] for r in await owner.fetch("SELECT failure_id FROM clusters.failures")}
        rolled = await owner.fetch(
            "SELECT summary, failure_count FROM clusters.pruned_summaries ORDER BY 1"
        )
    # Kept: the 3 most recent (the evidence's) — the rate window of an hour holds nothing
    # older than the latest — and the one recorded now.
    assert kept == {"new", "old-9", "old-8"}
    assert sum(r[1] for r in rolled) == 8
    assert await _snapshots(database_url) == before
