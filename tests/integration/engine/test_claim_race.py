"""Two members claiming the same key at once (a rebalance hands a partition over while the old
owner's batch is still in its transaction): the key is applied once. The claim's insert into the
current slot settles the race (queries.sql ``claim_keys``): a concurrent transaction that inserted
the key first makes it wait, and when that one commits, the claim fails and the batch is retried,
whose claim finds the key: it is not returned as new."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from spectral.db.connect import create_pool
from spectral.engine.handler import Delivery, Handler, HandlerResult
from spectral.engine.metrics import ConsumerMetrics
from spectral.engine.retrying import Retrying
from spectral.engine.transaction import BatchTransaction, PoolConnections
from spectral.retry import Backoff
from tests.integration.maintenance.support import PROJECTOR, RULE_CANDIDATES, claim_in_flight

pytestmark = pytest.mark.integration


class Applied(Handler[None]):
    """Records which keys it was given (as the projector, for the rule-candidates consumer)."""

    name = RULE_CANDIDATES
    event_types = ("platform.failure_cluster.detected",)
    database_role = PROJECTOR

    def __init__(self) -> None:
        self.keys: list[str] = []

    async def apply(
        self,
        conn: asyncpg.Connection,  # noqa: ARG002 - the claim is what is tested, not the effect
        deliveries: Sequence[Delivery],
    ) -> HandlerResult[None]:
        self.keys.extend(d.idempotency_key for d in deliveries)
        return HandlerResult()


def _delivery(key: str, offset: int) -> Delivery:
    return Delivery(None, key, uuid.uuid4(), "t", 0, offset, None, b"{}")


@pytest.mark.parametrize("first", ["commits", "rolls back"])
async def test_a_key_claimed_by_two_transactions_at_once_is_applied_once(
    database_url: str, first: str
) -> None:
    held = f"{uuid.uuid4()}:{uuid.uuid4().hex}"
    other = f"{uuid.uuid4()}:{uuid.uuid4().hex}"
    handler = Applied()
    metrics = ConsumerMetrics(CollectorRegistry(), handler.name)
    pool = await create_pool(database_url, role=PROJECTOR, min_size=1, max_size=1)
    try:
        transaction = BatchTransaction(
            handler,
            PoolConnections(pool),
            Retrying(Backoff(base=0.05, cap=0.2), metrics, asyncio.Event()),
        )
        async with claim_in_flight(database_url, [held]) as earlier:
            second = asyncio.create_task(
                transaction.apply([_delivery(held, 1), _delivery(other, 2)])
            )
            await asyncio.sleep(0.5)
            assert not second.done()  # it waits for the earlier transaction's row
            await (earlier.commit() if first == "commits" else earlier.rollback())
            outcome = await asyncio.wait_for(second, 30)
    finally:
        await pool.close()
    assert outcome.failed == ()
    if first == "commits":
        assert (outcome.fresh, outcome.duplicates) == (1, 1)
        assert handler.keys[-1:] == [other]
        assert held not in handler.keys
    else:
        assert (outcome.fresh, outcome.duplicates) == (2, 0)
        assert sorted(handler.keys) == sorted([held, other])


async def test_a_claim_that_waited_for_a_rotation_records_its_key_in_the_new_generation(
    database_url: str,
) -> None:
    """The claim's key goes to the slot of the generation current when it commits, whatever
    isolation the deployment's sessions default to (an operator may set
    ``default_transaction_isolation`` for a role or a database; the engine does not set it).
    At REPEATABLE READ the claim's snapshot is taken when its statement starts, before it waits
    for a rotation's lock: it then reads the generation that just ended as current and records
    the key in that slot, which the next rotation forgets — one generation early, within the
    readable lifetime the horizon promises (a redelivery is applied again)."""
    key = f"{uuid.uuid4()}:{uuid.uuid4().hex}"
    handler = Applied()
    pool = await create_pool(
        database_url,
        role=PROJECTOR,
        min_size=1,
        max_size=1,
        session={"default_transaction_isolation": "repeatable read"},
    )
    rotation = await asyncpg.connect(database_url)
    try:
        await rotation.execute(
            "BEGIN; SELECT core.lock_dedup_for_rotation();"
            "UPDATE core.dedup_generations SET ended_at = now() WHERE ended_at IS NULL;"
            "INSERT INTO core.dedup_generations (generation, slot, started_at)"
            " VALUES (2, 1, now());"
        )
        transaction = BatchTransaction(
            handler,
            PoolConnections(pool),
            Retrying(
                Backoff(base=0.05, cap=0.2),
                ConsumerMetrics(CollectorRegistry(), handler.name),
                asyncio.Event(),
            ),
        )
        batch = asyncio.create_task(transaction.apply([_delivery(key, 1)]))
        await asyncio.sleep(0.5)
        assert not batch.done()  # waits for the rotation's lock
        await rotation.execute("COMMIT")
        outcome = await asyncio.wait_for(batch, 30)
        assert outcome.fresh == 1
        slots = await rotation.fetch(
            "SELECT h.slot, g.ended_at IS NULL AS current FROM core.event_handled AS h "
            "JOIN core.dedup_generations AS g USING (slot) WHERE h.consumer = $1",
            handler.name,
        )
    finally:
        await rotation.close()
        await pool.close()
    assert [(r["slot"], r["current"]) for r in slots] == [(1, True)]
