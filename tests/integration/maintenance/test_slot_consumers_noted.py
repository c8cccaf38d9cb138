"""Every INSERT statement on the dedup record leaves each (slot, consumer) pair of its rows in
core.dedup_slot_consumers, which maintenance reads before a rotation (migration
dedup_key_leads). The trigger first checks whether a statement's rows are all of one pair the
list already shows (migration dedup_slot_consumers_noted_cheaply); any statement — one pair or
several, listed or not, in any order — still leaves every pair listed, and a listed pair is not
added again."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from spectral.db.connect import connect

pytestmark = pytest.mark.integration

_PAIRS = st.lists(
    st.tuples(st.sampled_from([0, 1]), st.sampled_from(["a", "b", "c"])), min_size=1, max_size=6
)
"""One INSERT statement's rows, each as its (slot, consumer)."""


def test_every_pair_of_a_statement_is_listed_once(database_url: str) -> None:
    loop = asyncio.new_event_loop()
    admin = loop.run_until_complete(connect(database_url))

    async def listed() -> list[tuple[int, str]]:
        rows = await admin.fetch(
            "SELECT slot, consumer FROM core.dedup_slot_consumers ORDER BY slot, consumer"
        )
        return [(r["slot"], r["consumer"]) for r in rows]

    @settings(max_examples=60, deadline=None, database=None)
    @given(st.lists(_PAIRS, min_size=1, max_size=4))
    @example([[(0, "a")], [(0, "a"), (0, "a")]])  # one listed pair: nothing added
    @example([[(0, "a")], [(0, "a"), (0, "b")]])  # a listed pair first, then a new one
    @example([[(0, "a")], [(0, "b"), (0, "a")]])
    @example([[(0, "a")], [(0, "a"), (1, "a")]])  # the same consumer in the other slot
    def statements(rows_of: list[list[tuple[int, str]]]) -> None:
        loop.run_until_complete(admin.execute("TRUNCATE core.event_handled"))
        seen: set[tuple[int, str]] = set()
        for rows in rows_of:
            loop.run_until_complete(
                admin.execute(
                    "INSERT INTO core.event_handled (consumer, dedup_key, event_id, outcome, "
                    "source_partition, source_offset, slot) "
                    "SELECT c, k, gen_random_uuid(), 'applied', 0, 0, s "
                    "FROM unnest($1::text[], $2::bytea[], $3::smallint[]) AS u (c, k, s)",
                    [consumer for _, consumer in rows],
                    [uuid.uuid4().bytes for _ in rows],
                    [slot for slot, _ in rows],
                )
            )
            seen |= set(rows)
            assert loop.run_until_complete(listed()) == sorted(seen)

    try:
        statements()
    finally:
        loop.run_until_complete(admin.close())
        loop.close()
