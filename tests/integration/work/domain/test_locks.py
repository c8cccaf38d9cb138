"""The ADR-035 §9 locks on a real server: target locks serialise, different targets do not,
the order rule is refused before the database is touched, locks are visible while held and
released by commit or by the death of the holder's connection."""

from __future__ import annotations

import asyncio

import pytest

from producers.work.domain.locks import LockKind, LockOrderError, TransactionLocks
from producers.work.domain.types import Conn
from spectral.db.connect import connect

pytestmark = pytest.mark.integration


async def test_a_target_lock_serialises_and_is_released_by_commit(database_url: str) -> None:
    one = await connect(database_url, role="spectral_executor")
    two = await connect(database_url, role="spectral_executor")
    three = await connect(database_url, role="spectral_executor")
    try:
        holder = one.transaction()
        await holder.start()
        await TransactionLocks(one).target("epic:d/E1")
        held = await three.fetch(  # pg_locks is server-wide: only this test's holder counts
            "SELECT objid FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::int::oid "
            "AND pid = $2",
            int(LockKind.TARGET),
            one.get_server_pid(),
        )
        assert len(held) == 1
        async with two.transaction():
            await asyncio.wait_for(TransactionLocks(two).target("epic:d/E2"), 2)  # other target
        waiter = asyncio.create_task(_locked(two, "epic:d/E1"))
        await asyncio.sleep(0.5)
        assert not waiter.done()  # same target: waits for the holder
        await holder.commit()
        await asyncio.wait_for(waiter, 5)
    finally:
        for conn in (one, two, three):
            await conn.close()


async def _locked(conn: Conn, scope: str) -> None:
    async with conn.transaction():
        await TransactionLocks(conn).target(scope)


async def test_a_dead_holder_releases_its_lock(database_url: str) -> None:
    one = await connect(database_url, role="spectral_executor")
    two = await connect(database_url, role="spectral_executor")
    try:
        await one.execute("BEGIN")
        await TransactionLocks(one).target("epic:d/E1")
        one.terminate()  # the worker's process died: the server ends its session
        await asyncio.wait_for(_locked(two, "epic:d/E1"), 10)
    finally:
        await two.close()


async def test_the_lock_order_rule_is_enforced_in_code(database_url: str) -> None:
    conn = await connect(database_url, role="spectral_executor")
    try:
        async with conn.transaction():
            locks = TransactionLocks(conn)
            await locks.project("project:p1")
            await locks.target("epic:d/E1")
            with pytest.raises(LockOrderError, match="may not be acquired while holding"):
                await locks.project("project:p1-other")
            assert [k.kind for k in locks.held] == [LockKind.PROJECT, LockKind.TARGET]
        with pytest.raises(LockOrderError, match="open transaction"):
            await TransactionLocks(conn).target("epic:d/E1")
    finally:
        await conn.close()


async def test_several_target_locks_are_taken_at_once_in_ascending_order(database_url: str) -> None:
    one = await connect(database_url, role="spectral_executor")
    two = await connect(database_url, role="spectral_executor")
    try:
        async with one.transaction():
            locks = TransactionLocks(one)
            await locks.targets(["epic:d/E3", "epic:d/E1", "epic:d/E2", "epic:d/E1"])
            assert [k.scope for k in locks.held] == ["epic:d/E1", "epic:d/E2", "epic:d/E3"]
            held = await two.fetchval(  # pg_locks is server-wide: only this test's holder counts
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                "AND classid = $1::int::oid AND granted AND pid = $2",
                int(LockKind.TARGET),
                one.get_server_pid(),
            )
            assert held == 3
            waiter = asyncio.create_task(_locked(two, "epic:d/E2"))
            await asyncio.sleep(0.3)
            assert not waiter.done()  # each of them is held
            with pytest.raises(LockOrderError, match="ascending scope order"):
                await locks.targets(["epic:d/E0"])
            await locks.targets(["epic:d/E2", "epic:d/E4"])  # held ones are skipped
            assert [k.scope for k in locks.held][-1] == "epic:d/E4"
        await asyncio.wait_for(waiter, 5)
    finally:
        for conn in (one, two):
            await conn.close()
