"""Two members writing the same cluster at once (a rebalance hands a partition over while the
old owner's batch is still in its transaction): the newest snapshot wins, whichever commits
first, and the later writer's outcome says what it did."""

from __future__ import annotations

import asyncio

import pytest

from tests.integration.rule_candidates.helpers import (
    connected,
    deliveries,
    new_cluster,
    new_handler,
    row,
    snapshot,
)

pytestmark = pytest.mark.integration

PROJECTOR = "spectral_projector"


@pytest.mark.parametrize("stored", ["new", "known"])
@pytest.mark.parametrize("later", ["newer", "older"])
async def test_a_writer_waiting_on_another_keeps_the_newest_snapshot(
    database_url: str, stored: str, later: str
) -> None:
    handler = new_handler()
    cluster = new_cluster()
    if stored == "known":
        async with connected(database_url, PROJECTOR) as conn, conn.transaction():
            await handler.apply(conn, deliveries(snapshot(cluster, minutes=1, failures=1)))
    first = snapshot(cluster, minutes=5, failures=5)
    second = snapshot(cluster, minutes=9 if later == "newer" else 3, failures=7)
    async with connected(database_url, PROJECTOR) as a, connected(database_url, PROJECTOR) as b:
        earlier = a.transaction()
        await earlier.start()
        await handler.apply(a, deliveries(first))
        waiting = b.transaction()
        await waiting.start()
        task = asyncio.create_task(handler.apply(b, deliveries(second)))
        await asyncio.sleep(0.5)
        assert not task.done()  # it waits for the earlier writer's row
        await earlier.commit()
        result = await asyncio.wait_for(task, 30)
        await waiting.commit()
    stored_row = await row(database_url, cluster)
    if later == "newer":
        assert result.stale == set()
        assert result.facts.get("updated") == 1
        assert "inserted" not in result.facts
        assert stored_row["snapshot_hash"] == second.payload.snapshot_hash
    else:
        assert result.stale == {second.idempotency_key}
        assert stored_row["snapshot_hash"] == first.payload.snapshot_hash
