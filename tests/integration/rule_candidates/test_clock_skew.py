"""The stale guard against a producer whose clock runs ahead, and timestamps at the bounds.

A snapshot's order counts its last_observed_at at most MAX_CLOCK_SKEW past its record's Kafka
timestamp, so one future-dated snapshot cannot make every later real snapshot stale; what is
stored is still what was hashed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from consumers.rule_candidates.collapse import MAX_CLOCK_SKEW
from contracts import EventEnvelope, FailureRef, failure_cluster_detected_event
from spectral.engine.handler import Delivery
from tests.integration.rule_candidates.helpers import (
    apply,
    connected,
    delivery,
    new_cluster,
    new_handler,
    row,
)

pytestmark = pytest.mark.integration

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def observed(cluster: Any, last: datetime, failures: int = 3) -> EventEnvelope[Any]:
    return failure_cluster_detected_event(
        cluster_id=cluster,
        rule_id=new_cluster(),
        workspace_id=new_cluster(),
        severity="high",
        failure_count=failures,
        first_observed_at=last - timedelta(hours=1),
        last_observed_at=last,
        evidence_bundle=[FailureRef(failure_id="f-1", observed_at=last, summary="s")],
    )


def published(envelope: EventEnvelope[Any], at: datetime, offset: int = 0) -> Delivery:
    """The delivery of ``envelope`` in a record the broker stamped ``at``."""
    stamp = int(at.timestamp() * 1000)
    return msgspec.structs.replace(delivery(envelope, offset=offset), timestamp_ms=stamp)


async def test_a_snapshot_from_a_clock_a_day_ahead_does_not_freeze_its_cluster(
    database_url: str,
) -> None:
    handler = new_handler()
    cluster = new_cluster()
    ahead = observed(cluster, NOW + timedelta(days=1))  # the producer's clock is a day ahead
    await apply(database_url, handler, [published(ahead, NOW)])
    stored = await row(database_url, cluster)
    assert stored["last_observed_at"] == NOW + timedelta(days=1)  # stored as hashed
    assert stored["ordered_at"] == NOW + MAX_CLOCK_SKEW  # ordered as published + skew

    # The clock is fixed; ten minutes later a real snapshot is observed and published.
    real = observed(cluster, NOW + timedelta(minutes=10), failures=4)
    result = await apply(
        database_url, handler, [published(real, NOW + timedelta(minutes=10), offset=1)]
    )
    assert result.stale == set()
    stored = await row(database_url, cluster)
    assert stored["snapshot_hash"] == real.payload.snapshot_hash
    assert stored["ordered_at"] == stored["last_observed_at"] == NOW + timedelta(minutes=10)


async def test_within_the_skew_the_observation_time_orders_as_before(database_url: str) -> None:
    handler = new_handler()
    cluster = new_cluster()
    slightly_ahead = observed(cluster, NOW + timedelta(minutes=2))
    earlier = observed(cluster, NOW + timedelta(minutes=1), failures=9)
    batch = [published(slightly_ahead, NOW), published(earlier, NOW, offset=1)]
    result = await apply(database_url, handler, batch)
    assert result.stale == {earlier.idempotency_key}
    assert (await row(database_url, cluster))[
        "snapshot_hash"
    ] == slightly_ahead.payload.snapshot_hash


async def test_the_last_year_the_contract_allows_is_stored_as_written_not_as_infinity(
    database_url: str,
) -> None:
    handler = new_handler()
    cluster = new_cluster()
    last = datetime(9998, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    far = observed(cluster, last)
    await apply(database_url, handler, [published(far, NOW)])
    stored = await row(database_url, cluster)
    assert stored["last_observed_at"] == last  # asyncpg stores datetime.max (year 9999) as infinity
    assert stored["ordered_at"] == NOW + MAX_CLOCK_SKEW
    later = observed(cluster, NOW + timedelta(hours=1))
    await apply(database_url, handler, [published(later, NOW + timedelta(hours=1), offset=1)])
    assert (await row(database_url, cluster))["snapshot_hash"] == later.payload.snapshot_hash


async def test_a_row_inserted_without_an_order_is_ordered_by_its_observation_time(
    database_url: str,
) -> None:
    # By hand or by a tool that predates ordered_at; the projection always names it.
    insert = (
        "INSERT INTO platform.rule_candidates_pending (cluster_id, snapshot_hash, rule_id,"
        " workspace_id, severity, failure_count, first_observed_at, last_observed_at,"
        " evidence_bundle{column}) VALUES ($1, repeat('a', 32), gen_random_uuid(),"
        " gen_random_uuid(), 'low', 1, $2, $2, '[]'{value}) RETURNING ordered_at"
    )
    async with connected(database_url, None) as conn:
        unnamed = await conn.fetchval(insert.format(column="", value=""), new_cluster(), NOW)
        named = await conn.fetchval(
            insert.format(column=", ordered_at", value=", $3"),
            new_cluster(),
            NOW,
            NOW - MAX_CLOCK_SKEW,
        )
    assert unnamed == NOW
    assert named == NOW - MAX_CLOCK_SKEW
