"""What a tick reads to evaluate the clusters that gained failures: their facts (cluster_facts)
and their evidence candidates (evidence_candidates), as spectral_producer — once per cluster per
tick that finds it dirty, under the cluster's row lock (an ingest of the cluster waits)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import pytest

import producers.clusters
from producers.clusters.evidence import EVIDENCE_LIMIT
from producers.clusters.repository import PRODUCER_ROLE
from spectral.db.queries import load_queries
from tests.integration.maintenance.support import session
from tests.support import explained, plan_rows_read

pytestmark = pytest.mark.integration

SQL = load_queries(Path(producers.clusters.__file__).with_name("queries.sql"))


def _cluster(g: int) -> uuid.UUID:
    return uuid.UUID(int=g)


HOT = 5_000
"""Failures of the hot cluster, all within the retention (30 days)."""
SUMMARIES = 7
"""Distinct summaries among them."""


async def _busy_clusters(database_url: str, count: int, *, analysed: bool) -> None:
    """Clusters 1..count (cluster_id = UUID(int=c)), each with HOT failures ``f<c>-<g>``, one
    every 8 minutes back from now (g = 1 the latest), of SUMMARIES summaries."""
    async with session(database_url) as admin:
        await admin.execute(
            "INSERT INTO clusters.clusters (cluster_id, workspace_id, rule_id, signature, "
            "revision) "
            "SELECT ('00000000-0000-0000-0000-' || lpad(to_hex(c), 12, '0'))::uuid, "
            "gen_random_uuid(), gen_random_uuid(), 'sig' || c, 1 "
            "FROM generate_series(1, $1::int) AS c",
            count,
        )
        await admin.execute(
            "INSERT INTO clusters.failures (failure_id, cluster_id, observed_at, summary) "
            "SELECT 'f' || c || '-' || g, "
            "('00000000-0000-0000-0000-' || lpad(to_hex(c), 12, '0'))::uuid, "
            "now() - make_interval(mins => 8 * g), 'summary ' || (g % $3::int) "
            "FROM generate_series(1, $1::int) AS g, generate_series(1, $2::int) AS c",
            HOT,
            count,
            SUMMARIES,
        )
        if analysed:
            await admin.execute("ANALYZE clusters.clusters, clusters.failures")


@pytest.mark.parametrize("analysed", [False, True])
async def test_the_evidence_of_a_hot_cluster_reads_its_summaries_not_its_whole_window(
    database_url: str, analysed: bool
) -> None:
    """Guarantee: the evidence candidates of a cluster cost a read of its summaries' counts and
    of the few failures the evidence rule can pick (the most recent one of each of the top
    summaries, the EVIDENCE_LIMIT most recent ones) — not a read of every failure the cluster
    holds.

    evidence_candidates takes every live failure of the cluster (`live`: the whole window the
    retention keeps, 30 days by default), groups them by summary to count each, joins every one
    of them back to its count, then sorts them all twice — by (summary, observed_at) for each
    summary's representative and by observed_at for the most recent — to keep 2 x
    EVIDENCE_LIMIT rows. No index serves the counts (retention rolls up only the pruned
    failures' counts, clusters.pruned_summaries), and the most-recent half does not use
    failures_by_cluster, whose order it is. A hot cluster is dirty at every tick, so each tick
    re-reads and re-sorts its whole window while holding its row lock, and its cost grows with
    the cluster's rate x the retention.

    Minimal reproduction: one cluster with 5,000 failures of 7 summaries (one every 8
    minutes, the last 28 days); its evidence as spectral_producer returns the 10 most recent
    failures and read 30,032 rows without statistics, 25,032 with (every failure once per scan
    of the CTE holding it). Measured by hand (vacuumed and analysed): 200,000 failures in the
    cluster (one every 12 s over 28 days), 1,000,032 rows read and 1.2-1.3 s per evaluation —
    its sorts spilled to disk — at every tick that finds it dirty; 50,000: 0.23-0.26 s. The
    rows counted are every row every scan of the plan produced or threw away. The counts and each
    summary's most recent failure are kept as failures are recorded now (clusters.summary_counts,
    migration 0065): 200,000 failures, 99 rows read and 0.0006 s."""
    await _busy_clusters(database_url, 1, analysed=analysed)
    async with session(database_url, PRODUCER_ROLE) as conn:
        plan = await explained(conn, SQL["evidence_candidates"], [[_cluster(1)], EVIDENCE_LIMIT])
        rows = await conn.fetch(SQL["evidence_candidates"], [_cluster(1)], EVIDENCE_LIMIT)
    # the 10 most recent failures, among which each summary's representative
    assert sorted(r["failure_id"] for r in rows) == sorted(f"f1-{g}" for g in range(1, 11))
    assert {r["summary_count"] for r in rows} <= {HOT // SUMMARIES, HOT // SUMMARIES + 1}
    read = plan_rows_read(plan)
    if analysed:
        # the summaries' counts (each with its most recent failure), the most recent failures
        assert read <= 10 * (SUMMARIES + 2 * EVIDENCE_LIMIT), read
    else:
        # Before any statistics the planner takes a cluster for a few rows and picks its most
        # recent failures with a top-N sort over them: one read of the window, in bounded
        # memory — not the counts, joins and full sorts of the whole window it read before.
        assert read <= 2 * HOT + 10 * (SUMMARIES + 2 * EVIDENCE_LIMIT), read


RATE_WINDOW_HOURS = 24
"""The severity policy's rate window (severity.py: the failures it counts before the latest)."""
OTHERS = 9
"""Clusters as busy as the hot one beside it (a table of one cluster is cheapest read whole)."""


@pytest.mark.parametrize("analysed", [False, True])
async def test_the_facts_of_a_hot_cluster_read_its_rate_window_not_its_whole_window(
    database_url: str, analysed: bool
) -> None:
    """Guarantee: a cluster's facts (its count, first and last observation, and the failures of
    the rate window before its latest) cost a read of its rate window and its summaries — not a
    read of every failure the retention keeps.

    cluster_facts counted the cluster's live failures and took their min and max in one
    aggregate over all of them: a hot cluster's whole window (30 days) at every tick that found
    it dirty, under its row lock, where the severity policy needs only the last 24 hours.
    Minimal reproduction: 5,000 failures one every 8 minutes (the last 28 days: 181 in the
    rate window), beside 9 other clusters as busy; the facts read 10,363 rows (with or without
    statistics). Measured by hand: 200,000 failures (beside 4 clusters as busy), 207,202 rows
    and 0.026 s per evaluation; reading the rate window and the summaries instead, 7,241 rows
    and 0.0015 s."""
    await _busy_clusters(database_url, 1 + OTHERS, analysed=analysed)
    window = timedelta(hours=RATE_WINDOW_HOURS)
    async with session(database_url, PRODUCER_ROLE) as conn:
        args = [[_cluster(1)], "medium", window]
        plan = await explained(conn, SQL["cluster_facts"], args)
        [row] = await conn.fetch(SQL["cluster_facts"], *args)
    in_window = RATE_WINDOW_HOURS * 60 // 8 + 1  # the latest one, and the window before it
    assert row["failure_count"] == HOT
    assert row["recent_count"] == in_window
    read = plan_rows_read(plan)
    if analysed:
        assert read <= 2 * in_window + 10 * SUMMARIES, read
    else:
        assert read <= 2 * HOT, read
