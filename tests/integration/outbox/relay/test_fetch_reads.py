"""What a relay fetch reads, against a backlog shaped to hurt it: many keys left out of the
batches (Kafka refused their first row for good) read by a plan the relay's session kept from
quieter fetches."""

from __future__ import annotations

import time

import pytest

from spectral.outbox.relay.repository import _SQL, RELAY_ROLE, RelayRepository
from spectral.outbox.relay.shards import SHARD_COUNT
from tests.integration.maintenance.support import session
from tests.support import explained, plan_rows_read

pytestmark = pytest.mark.integration

BATCH = 20
REFUSED = 5_000
"""Keys whose first row Kafka refused for good, each with that row unpublished."""


async def _write(database_url: str, key: str, rows: int, prefix: str) -> None:
    """``rows`` rows written without a delay; ``key`` may name a column expression of g."""
    async with session(database_url) as admin:
        await admin.execute(
            "INSERT INTO core.outbox (event_type, record_key, idempotency_key, envelope) "
            f"SELECT 't', {key}, '{prefix}' || g, '\\x00'::bytea "
            "FROM generate_series(1, $1::int) AS g",
            rows,
        )


async def _timed_fetch(repo: RelayRepository, shards: list[int], leave_out: list[str]) -> float:
    """Seconds of the fastest of two fetches (the database's work dominates them)."""
    best = float("inf")
    for _ in range(2):
        started = time.perf_counter()
        await repo.fetch_batch(shards, BATCH, leave_out=leave_out)
        best = min(best, time.perf_counter() - started)
    return best


async def test_a_fetch_leaving_many_keys_out_costs_the_same_in_a_session_that_fetched_before(
    database_url: str,
) -> None:
    """Guarantee: the keys a fetch leaves out ($4, the keys whose first row Kafka refused for
    good) cost a row one lookup, whatever the session fetched before: a fetch's cost does not
    grow with rows passed x keys left out.

    fetch_batch filters each row with `o.record_key <> ALL($4::text[])`. A custom plan holds
    the array as a constant, which PostgreSQL searches by hash; the generic plan the relay's
    session switches to after five fetches (asyncpg prepares the statement once per session,
    plan_cache_mode is auto) holds a parameter, which it searches element by element for every
    row. A relay that holds part of the shards (any deployment of two relays or more: $2 is not
    NULL) gets the generic plan after five ordinary fetches with no key left out; then a
    topic refusing records for good (missing, not authorized, a size limit lowered) holds back
    every key of its event type, and each row the fetch passes is compared with all of them.

    Minimal reproduction: 5,000 keys with one unpublished row each, refused, then 1,000 rows of
    other keys; a relay holding half the shards; five fetches leaving nothing out, then the
    fetch leaving the 5,000 keys out: ~0.2 s, where the same fetch in a fresh session (a custom
    plan, the same rows passed) takes ~0.008 s. Measured by hand at 10,000 refused
    keys: 1.3 s per fetch in the session that fetched before, 0.03 s in a fresh one (every
    fetch until the keys are published or forgotten)."""
    await _write(database_url, "'r' || g", REFUSED, "r")
    await _write(database_url, "'k' || g", 1_000, "o")
    refused = sorted(f"r{g}" for g in range(1, REFUSED + 1))
    shards = list(range(0, SHARD_COUNT, 2))
    kept = await RelayRepository.open(database_url, role=RELAY_ROLE)
    fresh = await RelayRepository.open(database_url, role=RELAY_ROLE)
    try:
        for _ in range(6):  # ordinary fetches: the session's plan cache settles
            await kept.fetch_batch(shards, BATCH)
        after_quiet_fetches = await _timed_fetch(kept, shards, refused)
        in_a_fresh_session = await _timed_fetch(fresh, shards, refused)
        plan = await explained(
            fresh._conn, _SQL["fetch_batch"], [SHARD_COUNT, shards, BATCH, refused, []]
        )
    finally:
        await kept.close()
        await fresh.close()
    # the rows passed are no more than the refused keys' rows and the batch's shards' rows
    assert plan_rows_read(plan) <= 2 * (REFUSED + 1_000), plan_rows_read(plan)
    assert after_quiet_fetches <= 4 * in_a_fresh_session + 0.05, (
        after_quiet_fetches,
        in_a_fresh_session,
    )
