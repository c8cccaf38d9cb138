"""What retention reads to prune the redrive record (prune_redrives: one batch per statement,
statement after statement until a topic's rows past the horizon are gone)."""

from __future__ import annotations

from pathlib import Path

import pytest

import spectral.maintenance
from spectral.db.queries import load_queries
from tests.integration.maintenance.support import session
from tests.support import explained, plan_rows_read

pytestmark = pytest.mark.integration

RETENTION_SQL = load_queries(Path(spectral.maintenance.__file__).with_name("retention.sql"))
MAINTAINER = "spectral_maintainer"
PARTITIONS = 20
OLD = 100
"""Redrives per partition of the dead-letter topic past the horizon (its first offsets)."""
YOUNG = 200
"""Redrives per partition since (its later offsets), kept."""
BATCH = 100
"""Rows a statement deletes (retention.BATCH, scaled down with the rows)."""


@pytest.mark.parametrize("analysed", [False, True])
async def test_pruning_the_redrive_record_reads_each_kept_row_a_bounded_number_of_times(
    database_url: str, analysed: bool
) -> None:
    """Guarantee: a pass of retention over the redrive record reads each row of a topic a
    bounded number of times, however many batches the rows past the horizon take.

    prune_redrives deletes `LIMIT $4` rows of a (dead-letter topic, source topic) with
    redriven_at < horizon, statement after statement. No index holds redriven_at: each
    statement walks the topic's rows in the primary key's order (partition, offset) — or the
    whole table — from the start, so it reads again every row kept before the first row it
    deletes. Redrives accumulate in every partition in offset order (old ones first, young ones
    after), so the k-th batch reads the young rows of the k partitions emptied before it: a
    pass costs batches x kept rows.

    Minimal reproduction: one dead-letter topic of 20 partitions, each with 100 redrives past
    the horizon then 200 since (6,000 rows); batches of 100 as spectral_maintainer delete the
    2,000 old rows in 20 statements that read 174,000 rows in all (147,001 analysed): each
    statement reads the table again (a sequential scan), kept rows included. Measured by hand
    at retention's own batch of 5,000 and its 200,000 rows per pass, over 50 partitions of
    4,000 old and 4,000 young redrives (400,000 rows, vacuumed, analysed): 2.9 s for the
    pass's 40 statements. The rows counted are every row every scan of the plans produced or
    threw away."""
    async with session(database_url) as admin:
        await admin.execute(
            "INSERT INTO core.dlq_redrives (dlq_topic, dlq_partition, dlq_offset, reason, "
            "source_topic, redriven_at) SELECT 'dlq', p, o, 'r', 'src', CASE WHEN o < $2 "
            "THEN now() - interval '30 days' ELSE now() END "
            "FROM generate_series(0, $1::int - 1) AS p, generate_series(0, $2::int + $3::int - 1) "
            "AS o",
            PARTITIONS,
            OLD,
            YOUNG,
        )
        if analysed:
            await admin.execute("ANALYZE core.dlq_redrives")
    args = ["dlq", "src", None, BATCH]
    read = deleted = 0
    async with session(database_url, MAINTAINER) as conn:
        args[2] = await conn.fetchval("SELECT now() - interval '1 day'")
        for _ in range(PARTITIONS + 1):
            plan = await explained(conn, RETENTION_SQL["prune_redrives"], args)
            read += plan_rows_read(plan)
            done = int((await conn.execute(RETENTION_SQL["prune_redrives"], *args)).split()[-1])
            deleted += done
            if done < BATCH:
                break
    assert deleted == PARTITIONS * OLD
    total = PARTITIONS * (OLD + YOUNG)
    assert read <= 3 * total, read
