"""What `spectral dlq list T --reason R` reads of the dead-letter table (core.dead_letters, the
engine's last resort when the broker refuses even a reference dead letter):
dead_letter_summaries_of_topic, as spectral_operator."""

from __future__ import annotations

import pytest

from spectral.dlq.repository import OPERATOR_ROLE
from spectral.dlq.store import _SQL
from tests.integration.maintenance.support import session
from tests.support import explained, plan_rows_read

pytestmark = pytest.mark.integration

FLOOD = 20_000
"""Dead letters of topic 't' of one reason (refused by the broker while its dead-letter topic
could not take them), recorded first."""
OTHERS = 10
"""Dead letters of 't' of another reason, recorded after them."""
LIMIT = 100
"""`spectral dlq list`'s default --limit."""


@pytest.mark.parametrize("analysed", [False, True])
async def test_a_listing_of_one_reason_reads_that_reason_s_rows(
    database_url: str, analysed: bool
) -> None:
    """Guarantee: a listing of one topic's dead letters of one reason costs a read of the rows
    it lists — not a read of every row of the topic's other reasons.

    dead_letter_summaries_of_topic selects `source_topic = $1 AND ($2 IS NULL OR reason = $2)
    ORDER BY id LIMIT $3`; the table's only index beside its keys is dead_letters_topic
    (source_topic, id), which holds no reason, so the listing walks the topic's rows in id order
    (or the whole table) and throws away every row of another reason until it has a page or
    reaches the end. The table fills exactly when a dead-letter topic cannot take records (its
    record limit, its name, a missing permission), typically with a flood of one reason; the
    listing of any other reason then reads the whole flood, every time — where the same
    command's read of the topic itself stops at a bounded scan (LISTING_SCAN_RECORDS).

    Minimal reproduction: 20,000 dead letters of topic 't' of reason 'not_json', then 10 of
    'handler_error'; the listing of 'handler_error' as spectral_operator returns 10 rows and read
    20,010 (analysed; without statistics 40,020: the flood's index entries, then its rows).
    Measured by hand: 1,000,000 of one reason (vacuumed and analysed), 1,000,008 rows read and
    0.21 s per listing of another (a parallel scan of the whole table), for 10 rows. The rows
    counted are every row every scan of the plan produced or threw away."""
    async with session(database_url) as admin:
        await admin.execute(
            "INSERT INTO core.dead_letters (consumer, source_topic, source_partition, "
            "source_offset, reason, detail, refusal, failed_at, record_key, key_size, "
            "value_head, value_size, value_sha256, headers, header_count, history) "
            "SELECT 'c', 't', 0, g, CASE WHEN g > $1::int THEN 'handler_error' "
            "ELSE 'not_json' END, 'd', 'MessageSizeTooLargeError', now(), NULL, 0, "
            "'\\x7b'::bytea, 1, md5(g::text), '[]', 0, '[]' "
            "FROM generate_series(1, $1::int + $2::int) AS g",
            FLOOD,
            OTHERS,
        )
        if analysed:
            await admin.execute("ANALYZE core.dead_letters")
    async with session(database_url, OPERATOR_ROLE) as conn:
        args = ["t", "handler_error", LIMIT]
        plan = await explained(conn, _SQL["dead_letter_summaries_of_topic"], args)
        rows = await conn.fetch(_SQL["dead_letter_summaries_of_topic"], *args)
    assert [r["source_offset"] for r in rows] == list(range(FLOOD + 1, FLOOD + OTHERS + 1))
    read = plan_rows_read(plan)
    assert read <= 2 * LIMIT, read
