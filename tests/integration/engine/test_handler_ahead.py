"""A handler's work ahead of the dedup claim (Handler.ahead), against PostgreSQL: it runs while
the claim is in the database, and what it returns finishes the batch for the deliveries the
claim found new — all of them, or the batch less its duplicates; after a claim that found most
keys held the next batch's is not worked out ahead; a failure of it is the batch's data error
(applied one by one) and leaves the connection usable."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from spectral.db.connect import create_pool
from spectral.engine.handler import Delivery, Handler, HandlerResult
from spectral.engine.metrics import ConsumerMetrics
from spectral.engine.retrying import Retrying
from spectral.engine.transaction import BatchTransaction, PoolConnections
from spectral.retry import Backoff
from tests.integration.maintenance.support import PROJECTOR, RULE_CANDIDATES

pytestmark = pytest.mark.integration


class Ahead(Handler[None]):
    """Notes what it was given ahead, what its finish was given and whether ``apply`` ran;
    ``fail_on`` makes ahead raise for a batch holding that key."""

    name = RULE_CANDIDATES
    event_types = ("platform.failure_cluster.detected",)
    database_role = PROJECTOR

    def __init__(self, fail_on: str | None = None) -> None:
        self.ahead_of: list[list[str]] = []
        self.finished: list[list[str]] = []
        self.applied: list[list[str]] = []
        self.in_transaction: list[bool] = []
        self.fail_on = fail_on

    async def apply(
        self,
        conn: asyncpg.Connection,  # noqa: ARG002 - what it is given is what is tested
        deliveries: Sequence[Delivery],
    ) -> HandlerResult[None]:
        keys = [d.idempotency_key for d in deliveries]
        if self.fail_on in keys:
            raise ValueError("a record this handler cannot apply")
        self.applied.append(keys)
        return HandlerResult()

    def ahead(
        self, deliveries: Sequence[Delivery]
    ) -> Callable[[asyncpg.Connection, Sequence[Delivery]], Awaitable[HandlerResult[None]]]:
        keys = [d.idempotency_key for d in deliveries]
        if self.fail_on in keys:
            raise ValueError("a record this handler cannot work out")
        self.ahead_of.append(keys)

        async def finish(
            conn: asyncpg.Connection, fresh: Sequence[Delivery]
        ) -> HandlerResult[None]:
            self.in_transaction.append(conn.is_in_transaction())
            await conn.execute("SELECT 1")  # the connection is the transaction's, and free
            self.finished.append([d.idempotency_key for d in fresh])
            return HandlerResult()

        return finish


def _batch(n: int) -> list[Delivery]:
    return [
        Delivery(None, f"{uuid.uuid4()}:{uuid.uuid4().hex}", uuid.uuid4(), "t", 0, i, None, b"{}")
        for i in range(n)
    ]


async def _transaction(database_url: str, handler: Ahead) -> tuple[BatchTransaction, asyncpg.Pool]:
    pool = await create_pool(database_url, role=PROJECTOR, min_size=1, max_size=1)
    retrying = Retrying(
        Backoff(base=0.05, cap=0.2),
        ConsumerMetrics(CollectorRegistry(), handler.name),
        asyncio.Event(),
    )
    return BatchTransaction(handler, PoolConnections(pool), retrying), pool


async def test_the_work_ahead_finishes_the_batch_for_its_new_deliveries(database_url: str) -> None:
    handler = Ahead()
    transaction, pool = await _transaction(database_url, handler)
    try:
        first = _batch(6)
        await transaction.apply(first)  # every key new
        second = [*first[:2], *_batch(4)]  # two redelivered
        outcome = await transaction.apply(second)
        third = [*second[2:], *_batch(1)]  # most redelivered: the next is not worked out ahead
        await transaction.apply(third)
        fourth = _batch(3)
        await transaction.apply(fourth)
        fifth = _batch(3)  # the claim before found every key new: ahead again
        await transaction.apply(fifth)
    finally:
        await pool.close()
    keys = [[d.idempotency_key for d in b] for b in (first, second, third, fourth, fifth)]
    assert (outcome.fresh, outcome.duplicates) == (4, 2)
    assert handler.ahead_of == [keys[0], keys[1], keys[2], keys[4]]
    assert handler.finished == [keys[0], keys[1][2:], keys[2][4:], keys[4]]
    assert handler.applied == [keys[3]]  # the batch after a mostly-held claim
    assert handler.in_transaction == [True] * 4


async def test_a_failure_ahead_is_the_batchs_data_error(database_url: str) -> None:
    """The batch is applied one by one (each record its own transaction, the bad one
    dead-lettered), the claim having answered first: no statement left in flight on the
    connection."""
    batch = _batch(3)
    handler = Ahead(fail_on=batch[1].idempotency_key)
    transaction, pool = await _transaction(database_url, handler)
    try:
        outcome = await transaction.apply(batch)
        again = await transaction.apply(batch)  # nothing of the failed attempts was kept
    finally:
        await pool.close()
    assert [d.source_offset for d in outcome.failed] == [1]
    assert outcome.fresh == 2
    assert handler.finished == [[batch[0].idempotency_key], [batch[2].idempotency_key]]
    # The dead letter was not recorded as handled: redelivered, it fails again.
    assert (again.fresh, again.duplicates, len(again.failed)) == (0, 2, 1)


class OwnApply(Ahead):
    """A subclass that overrides only ``apply``: its ``apply`` is what runs."""

    async def apply(
        self, conn: asyncpg.Connection, deliveries: Sequence[Delivery]
    ) -> HandlerResult[None]:
        return await super().apply(conn, deliveries)


async def test_a_subclass_overriding_only_apply_is_applied_through_it(database_url: str) -> None:
    handler = OwnApply()
    transaction, pool = await _transaction(database_url, handler)
    try:
        batch = _batch(3)
        await transaction.apply(batch)
    finally:
        await pool.close()
    assert handler.ahead_of == []
    assert handler.applied == [[d.idempotency_key for d in batch]]
