"""What maintenance reads to name the consumers with rows in the previous dedup slot
(consumers_in_slot, every pass while a generation has ended and is not yet forgotten)."""

from __future__ import annotations

import pytest

from spectral.maintenance.repository import _SQL, MaintenanceRepository
from tests.integration.maintenance.support import session
from tests.support import explained, plan_rows_read

pytestmark = pytest.mark.integration

ROWS = 20_000
"""Dedup rows of the previous slot, two consumers' keys interleaved as they are handled."""


@pytest.mark.parametrize("analysed", [False, True])
async def test_naming_the_consumers_of_a_slot_reads_a_row_per_candidate(
    database_url: str, analysed: bool
) -> None:
    """Guarantee (the comment of consumers_in_slot): each candidate of core.dedup_slot_consumers
    is confirmed by one row of it in the slot — a consumer with rows is found at the first of
    them, and only a stale candidate costs a read of the slot.

    The planner turns the EXISTS into a semi-join, and, with no index leading with the consumer
    (the primary key is (dedup_key, consumer, slot) since dedup_key_leads), makes the slot's
    side unique by aggregating every row of the slot: the statement reads the whole previous
    slot at every maintenance pass, for a few names, with statistics or without and with no
    stale candidate at all.

    Minimal reproduction: slot 0 holding 20,000 rows of two consumers, interleaved; the
    statement for slot 0 as spectral_maintainer: 20,004 rows read to return 2 names. Measured
    by hand: 2,000,000 rows of two consumers, 2,000,002 rows read and 0.70 s a pass. The rows
    counted are every row every scan of the plan produced or threw away."""
    async with session(database_url) as admin:
        await admin.execute(
            "INSERT INTO core.event_handled (consumer, dedup_key, event_id, outcome, "
            "source_partition, source_offset, slot) "
            "SELECT CASE WHEN g % 2 = 0 THEN 'rule-candidates' ELSE 'work-executor' END, "
            "int4send(g), gen_random_uuid(), 'applied', 0, g, 0 "
            "FROM generate_series(1, $1::int) AS g",
            ROWS,
        )
        if analysed:
            await admin.execute("ANALYZE core.event_handled")
    repo = await MaintenanceRepository.open(database_url)
    try:
        assert await repo.consumers_in_slot(0) == ["rule-candidates", "work-executor"]
        plan = await explained(repo._conn, _SQL["consumers_in_slot"], [0])
    finally:
        await repo.close()
    read = plan_rows_read(plan)
    # the candidates (2), each confirmed by a row of it, and the list; the whole slot is ROWS
    assert read <= 100, read
