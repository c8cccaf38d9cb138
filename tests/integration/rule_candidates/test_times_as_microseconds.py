"""The projection's upsert takes and answers its times as microseconds since the Unix epoch
(``platform.upsert_rule_candidate_snapshots_us``, migration projection_times_as_microseconds).

What it stores is the instant the record wrote, to the microsecond, for every instant the
contract allows (years 1970 to 9998: past 2**53 microseconds, the year 2255, a conversion through
one float is off); what it answers of the snapshot it replaced is that snapshot's time in the same
count; a time stored as -infinity (a rebuild's reset) is answered as the least 64-bit integer,
older than every snapshot; and the function it replaces still works for a consumer of the
previous release running beside this one, writing the same row.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from consumers.rule_candidates.repository import RuleCandidatesRepository, SnapshotRow
from contracts.fields import EPOCH, epoch_micros
from tests.integration.rule_candidates.helpers import (
    apply,
    connected,
    deliveries,
    new_handler,
    row,
    snapshot,
)

pytestmark = pytest.mark.integration

_FIRST = datetime(1970, 1, 1, tzinfo=UTC)
_LAST = datetime(9998, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
_INSTANTS = st.datetimes(
    min_value=_FIRST.replace(tzinfo=None), max_value=_LAST.replace(tzinfo=None)
).map(lambda moment: moment.replace(tzinfo=UTC))
_LEAST_BIGINT = -(2**63)


def _row(
    cluster: uuid.UUID, at: datetime, count: int, ordered: datetime | None, *, prior: bool = True
) -> SnapshotRow:
    return (
        cluster,
        f"{count:032x}",
        uuid.UUID(int=1),
        uuid.UUID(int=2),
        "low",
        count,
        epoch_micros(at) - 1,  # first_observed: a microsecond before
        epoch_micros(at),
        None,
        b"[]",
        None if ordered is None else epoch_micros(ordered),
        prior,
    )


async def _upsert(database_url: str, rows: list[SnapshotRow]) -> list[Any]:
    async with connected(database_url, "spectral_projector") as conn, conn.transaction():
        return await RuleCandidatesRepository().upsert(conn, rows)


def test_stored_and_replaced_times_are_exact_to_the_microsecond_across_the_contracts_years(
    database_url: str,
) -> None:
    loop = asyncio.new_event_loop()

    @settings(max_examples=60, deadline=None, database=None)
    @given(a=_INSTANTS, b=_INSTANTS, capped=st.booleans())
    @example(a=datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC), b=_LAST, capped=False)
    @example(a=datetime(2255, 6, 5, 23, 47, 34, 740_993, tzinfo=UTC), b=_LAST, capped=True)  # 2**53
    @example(
        a=datetime(2000, 2, 29, 12, tzinfo=UTC), b=datetime(2100, 3, 1, tzinfo=UTC), capped=True
    )
    def upsert(a: datetime, b: datetime, capped: bool) -> None:
        older, newer = sorted((a, b))
        if older in {newer, _FIRST}:
            return  # the first observation is a microsecond earlier: not before 1970
        cluster = uuid.uuid4()
        # ordered_at: as last observed (None), or capped to a microsecond before it
        cap = older - timedelta(microseconds=1) if capped else None
        (inserted,) = loop.run_until_complete(_upsert(database_url, [_row(cluster, older, 1, cap)]))
        assert inserted.inserted
        assert inserted.prior is None
        stored = loop.run_until_complete(row(database_url, cluster))
        assert stored["last_observed_at"] == older
        assert stored["first_observed_at"] == older - timedelta(microseconds=1)
        assert stored["ordered_at"] == (older if cap is None else cap)

        (updated,) = loop.run_until_complete(_upsert(database_url, [_row(cluster, newer, 2, None)]))
        assert not updated.inserted
        assert updated.prior == (
            epoch_micros(older if cap is None else cap),
            epoch_micros(older),
            1,
            f"{1:032x}",
        )
        stored = loop.run_until_complete(row(database_url, cluster))
        assert (stored["last_observed_at"], stored["ordered_at"]) == (newer, newer)
        # not asked for (no superseded snapshot in its batch): no prior comes back
        later = newer + timedelta(microseconds=1)
        if later <= _LAST:
            (unasked,) = loop.run_until_complete(
                _upsert(database_url, [_row(cluster, later, 3, None, prior=False)])
            )
            assert (unasked.inserted, unasked.prior) == (False, None)

    try:
        upsert()
    finally:
        loop.close()


async def test_a_time_reset_to_minus_infinity_is_older_than_every_snapshot(
    database_url: str,
) -> None:
    """A rebuild sets every stored order to -infinity before it replays the topic: the prior
    answered is the least integer, so no snapshot of the batch is taken for stale."""
    cluster = uuid.uuid4()
    handler = new_handler()
    await apply(database_url, handler, deliveries(snapshot(cluster, minutes=1)))
    async with connected(database_url, None) as admin:
        await admin.execute(
            "UPDATE platform.rule_candidates_pending SET ordered_at = '-infinity', "
            "last_observed_at = '-infinity' WHERE cluster_id = $1",
            cluster,
        )
    (written,) = await _upsert(database_url, [_row(cluster, EPOCH + timedelta(days=1), 5, None)])
    assert written.prior is not None
    assert written.prior[:3] == (_LEAST_BIGINT, _LEAST_BIGINT, 3)
    async with connected(database_url, None) as admin:
        await admin.execute(
            "UPDATE platform.rule_candidates_pending SET ordered_at = '-infinity', "
            "last_observed_at = '-infinity' WHERE cluster_id = $1",
            cluster,
        )
    # a batch with a superseded snapshot: both newer than the reset row, neither stale
    batch = deliveries(snapshot(cluster, minutes=2), snapshot(cluster, minutes=3))
    result = await apply(database_url, handler, batch)
    assert result.stale == set()
    assert (await row(database_url, cluster))["last_observed_at"] == batch[
        1
    ].envelope.payload.last_observed_at


async def test_the_previous_releases_upsert_still_writes_the_same_row(database_url: str) -> None:
    """A consumer of the previous release (timestamps, platform.rule_candidate_snapshot) beside
    this one: the same snapshot writes the same row through either function."""
    at = datetime(2026, 2, 28, 23, 59, 59, 999_999, tzinfo=UTC)
    ours, theirs = uuid.uuid4(), uuid.uuid4()
    await _upsert(database_url, [_row(ours, at, 7, None)])
    async with connected(database_url, "spectral_projector") as conn:
        answered = await conn.fetch(
            "SELECT * FROM platform.upsert_rule_candidate_snapshots("
            "$1::platform.rule_candidate_snapshot[])",
            [
                (
                    theirs,
                    f"{7:032x}",
                    uuid.UUID(int=1),
                    uuid.UUID(int=2),
                    "low",
                    7,
                    at - timedelta(microseconds=1),
                    at,
                    None,
                    b"[]",
                    None,
                )
            ],
        )
        assert [r["inserted"] for r in answered] == [True]
    columns = (
        "snapshot_hash, rule_id, workspace_id, severity, failure_count, first_observed_at, "
        "last_observed_at, evidence_bundle, suggested_rule_stub, ordered_at, status"
    )
    async with connected(database_url, None) as admin:
        rows = await admin.fetch(
            f"SELECT cluster_id, {columns} FROM platform.rule_candidates_pending "
            "WHERE cluster_id = ANY($1::uuid[])",
            [ours, theirs],
        )
    by_cluster = {r["cluster_id"]: dict(r) | {"cluster_id": None} for r in rows}
    assert by_cluster[ours] == by_cluster[theirs]
    assert by_cluster[ours]["last_observed_at"] == at
