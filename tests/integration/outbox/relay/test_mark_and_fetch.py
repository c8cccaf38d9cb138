"""The relay marks a landed batch in the statement that reads the batch after next
(``fetch_batch(mark=...)``): the mark happens whatever the fetch finds, and the rows it marks are
never read again by that statement (which still sees them unpublished: one snapshot)."""

from __future__ import annotations

import pytest

from spectral.outbox.relay.repository import RELAY_ROLE, RelayRepository
from spectral.outbox.relay.shards import SHARD_COUNT
from tests.integration.maintenance.support import session

pytestmark = pytest.mark.integration

ALL = list(range(SHARD_COUNT))


async def _published(database_url: str) -> set[int]:
    async with session(database_url) as admin:
        rows = await admin.fetch("SELECT id FROM core.outbox WHERE published_at IS NOT NULL")
    return {int(r["id"]) for r in rows}


async def test_each_fetch_marks_the_batch_landed_before_it(database_url: str) -> None:
    async with session(database_url) as admin:
        await admin.execute(
            "INSERT INTO core.outbox (event_type, record_key, idempotency_key, envelope) "
            "SELECT 't', 'k' || (g % 7), 'i' || g, '\\x00'::bytea FROM generate_series(1, 30) AS g"
        )
    repo = await RelayRepository.open(database_url, role=RELAY_ROLE)
    try:
        first = await repo.fetch_batch(ALL, 10)
        second = await repo.fetch_batch(ALL, 10, in_flight=[r.id for r in first])
        third = await repo.fetch_batch(ALL, 10, in_flight=[r.id for r in second], mark=first)
        assert await _published(database_url) == {r.id for r in first}
        ids = [r.id for r in first + second + third]
        assert ids == sorted(ids)
        assert len(set(ids)) == 30
        # nothing left to read: the mark still happens
        assert await repo.fetch_batch(ALL, 10, in_flight=[r.id for r in third], mark=second) == []
        assert await repo.fetch_batch(ALL, 10, mark=third) == []
        assert await _published(database_url) == set(ids)
    finally:
        await repo.close()
