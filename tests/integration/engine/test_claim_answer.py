"""What the dedup claim answers (queries.sql ``claim_keys``, core.dedup_claim_held): the keys
of the batch that were already held — none when every key is new, all of them when none is —
and every key of the batch recorded once afterwards, the held ones untouched."""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.maintenance.support import PROJECTOR, RULE_CANDIDATES, held_in, session
from tests.unit.engine.test_keys import any_key

pytestmark = pytest.mark.integration


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(any_key, min_size=0, max_size=60, unique=True).flatmap(
        lambda keys: st.tuples(
            st.just(keys), st.lists(st.sampled_from(keys), unique=True) if keys else st.just([])
        )
    ),
    st.randoms(use_true_random=False),
)
def test_the_claim_answers_exactly_the_keys_held_before_it(
    database_url: str, batch_and_held: tuple[list[str], list[str]], order: random.Random
) -> None:
    keys, earlier = batch_and_held
    shuffled = list(keys)
    order.shuffle(shuffled)
    consumer = RULE_CANDIDATES  # a consumer of the projector's role (row-level security)

    async def check() -> None:
        async with session(database_url) as admin:  # the examples share the test's database
            await admin.execute("DELETE FROM core.event_handled WHERE consumer = $1", consumer)
        async with session(database_url, PROJECTOR) as conn:
            async with conn.transaction():
                assert await held_in(conn, earlier, consumer) == []  # all new then
            async with conn.transaction():
                held = await held_in(conn, shuffled, consumer)
            async with conn.transaction():
                again = await held_in(conn, shuffled, consumer)
        async with session(database_url) as admin:
            rows = await admin.fetch(
                "SELECT core.dedup_key_text(dedup_key) AS key, count(*) AS n"
                " FROM core.event_handled WHERE consumer = $1 GROUP BY 1",
                consumer,
            )
        assert sorted(held) == sorted(earlier)
        assert sorted(again) == sorted(keys)  # every key held the second time
        assert {r["key"]: r["n"] for r in rows} == dict.fromkeys(keys, 1)

    asyncio.run(check())


_ROTATED = (
    "SELECT core.lock_dedup_for_rotation();"
    "UPDATE core.dedup_generations SET ended_at = now() WHERE ended_at IS NULL;"
    "INSERT INTO core.dedup_generations (generation, slot, started_at) VALUES (2, 1, now());"
)
"""The ring's first rotation (nothing to forget): generation 1 in slot 0 is the previous one,
generation 2 in slot 1 the current one."""


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(any_key, min_size=0, max_size=60, unique=True).flatmap(
        lambda keys: st.tuples(
            st.just(keys),
            st.lists(
                st.sampled_from(["new", "previous", "current"]),
                min_size=len(keys),
                max_size=len(keys),
            ),
        )
    ),
    st.randoms(use_true_random=False),
)
def test_the_claim_answers_the_keys_either_live_slot_held(
    database_url: str, batch_and_where: tuple[list[str], list[str]], order: random.Random
) -> None:
    """After a rotation both slots are live: a key either holds is answered as held and not
    recorded again, whichever of the two generations recorded it; the new keys go to the
    current slot, each once."""
    keys, where = batch_and_where
    shuffled = list(keys)
    order.shuffle(shuffled)
    consumer = RULE_CANDIDATES
    placed = dict(zip(keys, where, strict=True))
    earlier = {
        slot: [k for k in keys if placed[k] == name]
        for slot, name in ((0, "previous"), (1, "current"))
    }

    async def check() -> None:
        async with session(database_url) as admin:
            if await admin.fetchval("SELECT count(*) FROM core.dedup_generations") == 1:
                async with admin.transaction():
                    await admin.execute(_ROTATED)
            await admin.execute("DELETE FROM core.event_handled WHERE consumer = $1", consumer)
            for slot, held in earlier.items():  # as a claim in that slot's generation left them
                await admin.execute(
                    "INSERT INTO core.event_handled (consumer, dedup_key, event_id, outcome,"
                    " source_partition, source_offset, slot)"
                    " SELECT $1, core.dedup_key(k), gen_random_uuid(), 'applied', 0, 0, $3"
                    " FROM unnest($2::text[]) AS k",
                    consumer,
                    held,
                    slot,
                )
        async with session(database_url, PROJECTOR) as conn, conn.transaction():
            held = await held_in(conn, shuffled, consumer)
        async with session(database_url) as admin:
            rows = await admin.fetch(
                "SELECT core.dedup_key_text(dedup_key) AS key, slot"
                " FROM core.event_handled WHERE consumer = $1",
                consumer,
            )
        assert sorted(held) == sorted(earlier[0] + earlier[1])
        assert sorted((r["key"], r["slot"]) for r in rows) == sorted(
            (k, {"previous": 0, "current": 1, "new": 1}[placed[k]]) for k in keys
        )

    asyncio.run(check())
