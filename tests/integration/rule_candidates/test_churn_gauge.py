"""The cluster_id churn gauges read from platform.cluster_signal_hours (real database)."""

from __future__ import annotations

import uuid

import pytest
from prometheus_client import CollectorRegistry

from consumers.rule_candidates.churn import RETENTION_HOURS, exceeds
from consumers.rule_candidates.deployment import build
from consumers.rule_candidates.handler import RuleCandidatesHandler
from spectral.settings import load_settings
from tests.integration.rule_candidates.helpers import (
    apply,
    connected,
    delivery,
    new_handler,
    sample,
    snapshot,
)

pytestmark = pytest.mark.integration


async def _signal(database_url: str, hours_ago: int, clusters: list[uuid.UUID]) -> None:
    async with connected(database_url, None) as conn:
        await conn.execute(
            "INSERT INTO platform.cluster_signal_hours (hour, cluster_id)"
            " SELECT date_trunc('hour', now()) - make_interval(hours => $1), c"
            " FROM unnest($2::uuid[]) AS c ON CONFLICT DO NOTHING",
            hours_ago,
            clusters,
        )


def _ids(n: int) -> list[uuid.UUID]:
    return [uuid.uuid4() for _ in range(n)]


def _handler(registry: CollectorRegistry) -> RuleCandidatesHandler:
    return build(load_settings(), "unused", registry)


async def _refresh(database_url: str, handler: RuleCandidatesHandler):  # type: ignore[no-untyped-def]  # noqa: ANN202
    async with connected(database_url, "spectral_projector") as conn:
        return await handler.refresh_churn(conn)


async def test_a_burst_of_new_cluster_ids_is_measured_against_the_trailing_week(
    database_url: str,
) -> None:
    for day in range(1, 8):
        clusters = _ids(10)
        await _signal(database_url, 24 * day + 10, clusters)
        await _signal(database_url, 24 * day + 12, clusters[:5])  # the same ids count once
    await _signal(database_url, 24 * 7 + 23, [uuid.uuid4()])  # the week's first hour: covered
    current = _ids(40)
    await _signal(database_url, 2, current[:20])
    await _signal(database_url, 5, current[20:])
    await _signal(database_url, RETENTION_HOURS + 5, _ids(3))  # long gone: pruned

    registry = CollectorRegistry()
    reading = await _refresh(database_url, _handler(registry))

    assert reading.distinct_24h == 40
    assert reading.baseline_windows == 7
    assert reading.baseline_24h == pytest.approx(71 / 7)
    assert exceeds(reading)
    assert sample(registry, "spectral_cluster_churn_distinct_24h") == 40
    assert sample(registry, "spectral_cluster_churn_baseline_24h") == pytest.approx(71 / 7)
    assert sample(registry, "spectral_cluster_churn_baseline_windows") == 7
    async with connected(database_url, None) as conn:
        oldest = await conn.fetchval(
            "SELECT max(extract(epoch FROM date_trunc('hour', now()) - hour) / 3600)::int"
            " FROM platform.cluster_signal_hours"
        )
    assert oldest == 24 * 7 + 23


async def test_a_young_deployment_has_no_baseline_to_alarm_on(database_url: str) -> None:
    await _signal(database_url, 30, _ids(4))  # inside window 1, after its first hour
    await _signal(database_url, 1, _ids(50))
    reading = await _refresh(database_url, _handler(CollectorRegistry()))
    assert (reading.distinct_24h, reading.baseline_windows, reading.baseline_24h) == (50, 0, 0.0)
    assert not exceeds(reading)


async def test_the_gauge_follows_the_projection(database_url: str) -> None:
    registry = CollectorRegistry()
    handler = _handler(registry)
    assert (await _refresh(database_url, handler)).distinct_24h == 0
    await _signal(database_url, 0, _ids(3))
    await _signal(database_url, 23, _ids(2))
    await _signal(database_url, 24, _ids(7))  # the previous window
    reading = await _refresh(database_url, handler)
    assert reading.distinct_24h == 5
    assert sample(registry, "spectral_cluster_churn_distinct_24h") == 5


async def test_periodic_refreshes_through_a_pool(database_url: str) -> None:
    from spectral.db.connect import create_pool  # noqa: PLC0415

    await _signal(database_url, 0, _ids(6))
    registry = CollectorRegistry()
    pool = await create_pool(database_url, role="spectral_projector")
    try:
        await _handler(registry).periodic(pool)
    finally:
        await pool.close()
    assert sample(registry, "spectral_cluster_churn_distinct_24h") == 6


async def _hours(database_url: str, cluster: uuid.UUID) -> list[int]:
    """Hours ago of the cluster's signal rows."""
    async with connected(database_url, None) as conn:
        rows = await conn.fetch(
            "SELECT (extract(epoch FROM date_trunc('hour', now()) - hour) / 3600)::int AS ago"
            " FROM platform.cluster_signal_hours WHERE cluster_id = $1 ORDER BY hour",
            cluster,
        )
    return [r["ago"] for r in rows]


async def test_every_applied_cluster_has_its_signal_hour_however_often_it_is_written(
    database_url: str,
) -> None:
    """The upsert skips the signal row of a cluster already signalled this hour; a cluster last
    signalled in an earlier hour (or whose row for this hour is its first) still gets one, and
    a stale snapshot signals nothing."""
    handler = new_handler()
    again, earlier, stale = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    await apply(
        database_url,
        handler,
        [delivery(snapshot(c, minutes=1), offset=i) for i, c in enumerate((again, earlier, stale))],
    )
    assert [await _hours(database_url, c) for c in (again, earlier, stale)] == [[0], [0], [0]]
    async with connected(database_url, None) as conn:  # as if signalled two hours ago only
        await conn.execute(
            "UPDATE platform.rule_candidates_pending"
            " SET last_signaled_at = last_signaled_at - interval '2 hours' WHERE cluster_id = $1",
            earlier,
        )
        await conn.execute(
            "UPDATE platform.cluster_signal_hours SET hour = hour - interval '2 hours'"
            " WHERE cluster_id = $1",
            earlier,
        )
    await apply(
        database_url,
        handler,
        [
            delivery(snapshot(again, minutes=2), offset=3),
            delivery(snapshot(earlier, minutes=2), offset=4),
            delivery(snapshot(stale, minutes=0), offset=5),
        ],
    )
    assert await _hours(database_url, again) == [0]
    assert await _hours(database_url, earlier) == [2, 0]
    assert await _hours(database_url, stale) == [0]
    reading = await _refresh(database_url, _handler(CollectorRegistry()))
    assert reading.distinct_24h == 3
