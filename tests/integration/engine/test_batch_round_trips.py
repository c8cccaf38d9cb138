"""A batch's transaction on the engine's pool begun early, while the batch before is applied
(transaction.py ``EarlyBegin``): the batch runs in it (its claim goes straight into the begun
transaction) or, not used, it is given back without leaving a session idle in a transaction.
A handler's own ``conn.transaction()`` inside it is a savepoint, as in any batch."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from spectral.db.connect import create_pool
from spectral.engine import transaction as transaction_module
from spectral.engine.handler import Delivery, Handler, HandlerResult, Rejection
from spectral.engine.metrics import ConsumerMetrics
from spectral.engine.retrying import Retrying
from spectral.engine.transaction import BatchTransaction, PoolConnections
from spectral.retry import Backoff
from tests.integration.maintenance.support import PROJECTOR, RULE_CANDIDATES

pytestmark = pytest.mark.integration


class Sorting(Handler[None]):
    """Reports the keys it was told to as stale or rejected; applies nothing else."""

    name = RULE_CANDIDATES
    event_types = ("platform.failure_cluster.detected",)
    database_role = PROJECTOR

    def __init__(self, stale: set[str], rejected: set[str]) -> None:
        self.stale = stale
        self.rejected = rejected
        self.backends: list[int] = []
        self.savepoints = 0

    async def apply(
        self, conn: asyncpg.Connection, deliveries: Sequence[Delivery]
    ) -> HandlerResult[None]:
        self.backends.append(conn.get_server_pid())
        async with conn.transaction():  # a savepoint inside the engine's transaction
            self.savepoints += 1
        result: HandlerResult[None] = HandlerResult()
        for d in deliveries:
            if d.idempotency_key in self.stale:
                result.stale.add(d.idempotency_key)
            elif d.idempotency_key in self.rejected:
                result.rejected.append(Rejection(d, "test_refusal", "refused by the test"))
        return result


def _logging(sent: list[str]) -> Callable[[Any], None]:
    """A query logger noting the batch transaction's messages a connection sends (not the
    pool's resets, nor asyncpg's type introspection)."""

    def note(logged: Any) -> None:
        query = logged.query.strip().rstrip(";")
        if query.startswith("BEGIN") or "core.dedup_" in query or query == "COMMIT":
            sent.append(query)

    return note


def _key() -> str:
    return f"{uuid.uuid4()}:{uuid.uuid4().hex}"


def _delivery(key: str, offset: int) -> Delivery:
    return Delivery(None, key, uuid.uuid4(), "t", 0, offset, None, b"{}")


async def _outcomes(database_url: str, keys: list[str]) -> dict[str, str]:
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT idempotency_key, outcome FROM core.event_handled_keys "
            "WHERE idempotency_key = ANY($1::text[])",
            keys,
        )
    finally:
        await conn.close()
    return {r["idempotency_key"]: r["outcome"] for r in rows}


async def _idle_in_transaction(database_url: str, pids: set[int]) -> set[int]:
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT pid FROM pg_stat_activity WHERE state LIKE 'idle in transaction%' "
            "AND pid = ANY($1::int[])",
            list(pids),
        )
    finally:
        await conn.close()
    return {r["pid"] for r in rows}


async def test_a_batch_runs_in_the_transaction_begun_early_and_one_not_used_is_given_back(
    database_url: str,
) -> None:
    handler = Sorting(set(), set())
    pool = await create_pool(database_url, role=PROJECTOR, min_size=2, max_size=2)
    try:
        connections = PoolConnections(pool)
        transaction = BatchTransaction(
            handler,
            connections,
            Retrying(
                Backoff(base=0.05, cap=0.2),
                ConsumerMetrics(CollectorRegistry(), "t"),
                asyncio.Event(),
            ),
        )
        # Used: the batch's statements run on the connection begun early.
        early = transaction.begin_early()
        assert early is not None
        begun = await early.take()
        assert begun is not None
        assert begun.conn.is_in_transaction()
        pid = begun.conn.get_server_pid()
        connections.give_back(begun)
        await asyncio.sleep(0.2)  # given back: its transaction rolled back by the pool's reset
        assert not await _idle_in_transaction(database_url, {pid})

        sent: list[str] = []
        held = [await pool.acquire() for _ in range(2)]
        for conn in held:
            conn.add_query_logger(_logging(sent))
        for conn in held:
            await pool.release(conn)
        early = transaction.begin_early()
        assert early is not None
        await asyncio.sleep(0.3)  # begun meanwhile, as while the batch before commits
        assert sent == ["BEGIN"]
        key = _key()
        await transaction.apply([_delivery(key, 1)], early)
        await asyncio.sleep(0.1)  # query loggers are called soon after, not at once
        assert sent[0] == "BEGIN"
        assert "BEGIN" not in sent[1:3]  # the claim went straight into the begun transaction
        assert sent[2:] == ["COMMIT"]
        assert handler.savepoints  # the handler's own conn.transaction() was a savepoint
        first = handler.backends[-1]
        assert await _outcomes(database_url, [key]) == {key: "applied"}

        # Not used (the batch was dropped, or failed): given back, nothing left open.
        early = transaction.begin_early()
        assert early is not None
        await asyncio.sleep(0.2)
        early.discard()
        deadline = time.monotonic() + 5
        pids = {first, handler.backends[-1]}
        while await _idle_in_transaction(database_url, pids) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not await _idle_in_transaction(database_url, pids)

    finally:
        await asyncio.wait_for(pool.close(), 10)


async def test_a_transaction_begun_too_long_before_its_batch_is_begun_anew(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    handler = Sorting(set(), set())
    pool = await create_pool(database_url, role=PROJECTOR, min_size=1, max_size=2)
    try:
        transaction = BatchTransaction(
            handler,
            PoolConnections(pool),
            Retrying(
                Backoff(base=0.05, cap=0.2),
                ConsumerMetrics(CollectorRegistry(), "t"),
                asyncio.Event(),
            ),
        )
        # Begun too long ago (the batch before was slow): given back, the batch begins anew.
        monkeypatch.setattr(transaction_module, "EARLY_BEGIN_SECONDS", 0.0)
        early = transaction.begin_early()
        assert early is not None
        await asyncio.sleep(0.05)
        key = _key()
        outcome = await transaction.apply([_delivery(key, 3)], early)
        assert outcome.fresh == 1
        assert await _outcomes(database_url, [key]) == {key: "applied"}
    finally:
        await asyncio.wait_for(pool.close(), 10)
