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
