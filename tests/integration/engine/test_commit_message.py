"""A batch that commits sends its few stale marks and rejected keys in the message of its COMMIT
(transaction.py): one round trip less before the commit. The transaction is still asyncpg's
``Transaction``, so a handler's own ``conn.transaction()`` is a savepoint inside it; only its
commit is sent by hand (``_commit_with``), and these tests hold the installed asyncpg to ending
it as its own ``commit()`` does."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from spectral.db.connect import create_pool
from spectral.engine.handler import Delivery, Handler, HandlerResult, Rejection
from spectral.engine.metrics import ConsumerMetrics
from spectral.engine.retrying import Retrying
from spectral.engine.transaction import (
    WITH_COMMIT_KEYS,
    BatchTransaction,
    PoolConnections,
    _commit_with,
)
from spectral.retry import Backoff
from tests.integration.maintenance.support import PROJECTOR, RULE_CANDIDATES

pytestmark = pytest.mark.integration

PROBE = "commit_probe.written"
"""A table the test's handler writes inside its own savepoints."""


class Sorting(Handler[None]):
    """Reports the keys it was told to as stale or rejected; ``inside`` runs on the batch's
    connection first (a handler's own statements)."""

    name = RULE_CANDIDATES
    event_types = ("platform.failure_cluster.detected",)
    database_role = PROJECTOR

    def __init__(
        self,
        stale: set[str],
        rejected: set[str],
        inside: Callable[[asyncpg.Connection], Any] | None = None,
    ) -> None:
        self.stale = stale
        self.rejected = rejected
        self.inside = inside

    async def apply(
        self, conn: asyncpg.Connection, deliveries: Sequence[Delivery]
    ) -> HandlerResult[None]:
        if self.inside is not None:
            await self.inside(conn)
        result: HandlerResult[None] = HandlerResult()
        for d in deliveries:
            if d.idempotency_key in self.stale:
                result.stale.add(d.idempotency_key)
            elif d.idempotency_key in self.rejected:
                result.rejected.append(Rejection(d, "test_refusal", "refused by the test"))
        return result


def _kind(query: str) -> str:
    """What a message of the batch's connection was."""
    if "core.dedup_claim_held" in query:
        return "claim"
    if "core.dedup_mark_stale" in query and query.rstrip().endswith("COMMIT;"):
        return "marks+COMMIT"
    return query.split(maxsplit=1)[0].rstrip(";")


def _key() -> str:
    return f"{uuid.uuid4()}:{uuid.uuid4().hex}"


def _delivery(key: str, offset: int) -> Delivery:
    return Delivery(None, key, uuid.uuid4(), "t", 0, offset, None, b"{}")


class _Watch:
    """The batch transaction's messages on the pool's one connection (not the pool's resets,
    nor asyncpg's type introspection), and what the event loop was told of (asyncpg reports a
    connection given back with a transaction still open there)."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.everything: list[str] = []
        """Every message, the pool's resets and asyncpg's introspection included."""
        self.loop_errors: list[str] = []

    def note(self, logged: Any) -> None:
        query = logged.query
        self.everything.append(query)
        if query.startswith(("BEGIN", "SAVEPOINT", "RELEASE", "ROLLBACK")) or (
            "core.dedup_" in query or "COMMIT" in query or PROBE in query
        ):
            self.sent.append(query)


@asynccontextmanager
async def _batches(
    handler: Handler[None], database_url: str, *, reset_in_commit: bool = False
) -> AsyncIterator[tuple[Any, _Watch]]:
    """A BatchTransaction on a pool of one connection (every batch on the same one);
    ``reset_in_commit``: the engine's pool, whose session reset a batch's COMMIT carries."""
    watch = _Watch()
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: watch.loop_errors.append(context["message"]))
    connections = (
        await PoolConnections.open(database_url, role=PROJECTOR, max_size=1)
        if reset_in_commit
        else PoolConnections(await create_pool(database_url, role=PROJECTOR, max_size=1))
    )
    pool = connections.pool
    try:
        async with pool.acquire() as conn:
            conn.add_query_logger(watch.note)
        yield (
            BatchTransaction(
                handler,
                connections,
                Retrying(
                    Backoff(base=0.05, cap=0.2),
                    ConsumerMetrics(CollectorRegistry(), "t"),
                    asyncio.Event(),
                ),
            ),
            watch,
        )
        async with pool.acquire() as conn:  # the connection came back with nothing open
            assert not conn.is_in_transaction()
    finally:
        await pool.close()
        loop.set_exception_handler(None)


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


async def test_stale_marks_and_rejected_keys_reach_the_server_with_the_commit(
    database_url: str,
) -> None:
    applied, stale, rejected = _key(), _key(), _key()
    async with _batches(Sorting({stale}, {rejected}), database_url) as (transaction, watch):
        outcome = await transaction.apply(
            [_delivery(applied, 1), _delivery(stale, 2), _delivery(rejected, 3)]
        )
    assert (outcome.fresh, outcome.duplicates, len(outcome.failed)) == (3, 0, 1)
    # BEGIN, the claim, then one message: both outcome statements and the COMMIT.
    assert len(watch.sent) == 3, watch.sent
    assert watch.sent[0].startswith("BEGIN")
    last = watch.sent[-1]
    assert "dedup_mark_stale" in last
    assert "dedup_forget" in last
    assert last.rstrip().endswith("COMMIT;")
    # The stale key is marked, the rejected one forgotten (a redrive can apply it).
    assert await _outcomes(database_url, [applied, stale, rejected]) == {
        applied: "applied",
        stale: "stale",
    }
    assert watch.loop_errors == []


async def test_many_stale_keys_are_marked_by_the_prepared_statement_before_the_commit(
    database_url: str,
) -> None:
    stale = [_key() for _ in range(WITH_COMMIT_KEYS + 1)]
    async with _batches(Sorting(set(stale), set()), database_url) as (transaction, watch):
        outcome = await transaction.apply([_delivery(k, i) for i, k in enumerate(stale)])
    assert (outcome.fresh, outcome.duplicates) == (len(stale), 0)
    assert len(watch.sent) == 4, watch.sent  # BEGIN, the claim, the stale marks' array, COMMIT
    assert "$2::bytea[]" in watch.sent[2]
    assert watch.sent[3] == "COMMIT;"
    assert await _outcomes(database_url, stale) == dict.fromkeys(stale, "stale")


async def test_a_batch_without_outcomes_commits_as_asyncpg_does(database_url: str) -> None:
    key = _key()
    async with _batches(Sorting(set(), set()), database_url) as (transaction, watch):
        await transaction.apply([_delivery(key, 1)])
    assert watch.sent[-1] == "COMMIT;"
    assert await _outcomes(database_url, [key]) == {key: "applied"}


async def _probe_table(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "CREATE SCHEMA commit_probe; CREATE TABLE commit_probe.written (v text);"
            f"GRANT USAGE ON SCHEMA commit_probe TO {PROJECTOR};"
            f"GRANT SELECT, INSERT ON commit_probe.written TO {PROJECTOR};"
        )
    finally:
        await conn.close()


async def test_a_handlers_own_savepoints_work_inside_a_batch_committed_with_its_marks(
    database_url: str,
) -> None:
    """A handler (a plugin's) may open ``conn.transaction()`` blocks of its own: savepoints of
    the batch's transaction, kept or rolled back on their own; the batch then commits with its
    stale marks in the COMMIT's message, and the connection goes back to the pool clean."""
    await _probe_table(database_url)

    async def savepoints(conn: asyncpg.Connection) -> None:
        async with conn.transaction():
            await conn.execute(f"INSERT INTO {PROBE} VALUES ('kept')")
        try:
            async with conn.transaction():
                await conn.execute(f"INSERT INTO {PROBE} VALUES ('undone')")
                raise LookupError  # noqa: TRY301 - the handler's own block fails on its own
        except LookupError:
            pass

    applied, stale = _key(), _key()
    handler = Sorting({stale}, set(), savepoints)
    async with _batches(handler, database_url) as (transaction, watch):
        await transaction.apply([_delivery(applied, 1), _delivery(stale, 2)])
        # The next batch on the same connection is a transaction again, its savepoints too.
        again = _key()
        handler.stale = {again}
        await transaction.apply([_delivery(again, 3)])
    one_batch = ["BEGIN", "claim", "SAVEPOINT", "INSERT", "RELEASE", "SAVEPOINT", "INSERT"]
    one_batch += ["ROLLBACK", "marks+COMMIT"]
    assert [_kind(q) for q in watch.sent] == one_batch * 2, watch.sent
    conn = await asyncpg.connect(database_url)
    try:
        assert [r["v"] for r in await conn.fetch(f"SELECT v FROM {PROBE}")] == ["kept", "kept"]
    finally:
        await conn.close()
    assert await _outcomes(database_url, [applied, stale, again]) == {
        applied: "applied",
        stale: "stale",
        again: "stale",
    }
    assert watch.loop_errors == []


@pytest.mark.parametrize("reset_in_commit", [False, True], ids=["pool-reset", "reset-in-commit"])
async def test_a_commit_message_that_fails_rolls_the_batch_back(
    database_url: str, reset_in_commit: bool
) -> None:
    """The marks fail in the COMMIT's message (here: the handler made the transaction read-only,
    so the UPDATE of the marks is refused): PostgreSQL skips the COMMIT, the batch is rolled
    back (nothing of it stays), the connection goes back clean and the next transactions on it
    work — the engine's one-by-one fallback then commits the delivery that has no mark and
    dead-letters the one whose mark fails."""

    async def read_only(conn: asyncpg.Connection) -> None:
        await conn.execute("SET TRANSACTION READ ONLY")

    applied, stale = _key(), _key()
    handler = Sorting({stale}, set(), read_only)
    async with _batches(handler, database_url, reset_in_commit=reset_in_commit) as (
        transaction,
        watch,
    ):
        outcome = await transaction.apply([_delivery(applied, 1), _delivery(stale, 2)])
    assert [d.reason for d in outcome.failed] == ["handler_error"]
    assert "read-only transaction" in outcome.failed[0].detail
    assert await _outcomes(database_url, [applied, stale]) == {applied: "applied"}
    assert watch.loop_errors == []


async def test_the_commit_sent_by_hand_ends_asyncpgs_transaction_as_its_commit_does(
    database_url: str,
) -> None:
    """Pins ``_commit_with`` to the installed asyncpg: after it, the Transaction and its
    connection are where ``Transaction.commit()`` leaves them — committed, no transaction
    open, a new ``conn.transaction()`` is a transaction (its inner one a savepoint) — and a
    failed message leaves the Transaction failed with its server transaction still to roll
    back."""
    await _probe_table(database_url)
    conn = await asyncpg.connect(database_url)
    try:
        ends: dict[str, tuple[str, bool, str]] = {}
        for how in ("asyncpg", "by hand"):
            transaction = conn.transaction()
            await transaction.start()
            await conn.execute(f"INSERT INTO {PROBE} VALUES ($1)", how)
            if how == "asyncpg":
                await transaction.commit()
            else:
                await _commit_with(transaction, f"INSERT INTO {PROBE} VALUES ('with it');")
            with pytest.raises(asyncpg.InterfaceError) as again:
                await transaction.commit()
            ends[how] = (repr(transaction).split()[1], conn.is_in_transaction(), str(again.value))
            sent: list[str] = []

            def note(logged: Any, sent: list[str] = sent) -> None:
                sent.append(logged.query)

            conn.add_query_logger(note)
            async with conn.transaction(), conn.transaction():
                pass
            await asyncio.sleep(0.01)  # query loggers are called soon after, not at once
            conn.remove_query_logger(note)
            assert [_kind(q) for q in sent] == [
                "BEGIN",
                "SAVEPOINT",
                "RELEASE",
                "COMMIT",
            ]
        assert (
            ends["by hand"]
            == ends["asyncpg"]
            == (
                "state:committed",
                False,
                "cannot commit; the transaction is already committed",
            )
        )
        rows = await conn.fetch(f"SELECT v FROM {PROBE} ORDER BY v")
        assert [r["v"] for r in rows] == ["asyncpg", "by hand", "with it"]

        transaction = conn.transaction()
        await transaction.start()
        with pytest.raises(asyncpg.DivisionByZeroError):
            await _commit_with(transaction, "SELECT 1 / 0;")
        assert repr(transaction).split()[1] == "state:failed"
        assert conn.is_in_transaction()  # the COMMIT was skipped: the caller rolls back
        await conn.execute("ROLLBACK;")
        async with conn.transaction():
            assert await conn.fetchval("SELECT 1") == 1
    finally:
        await conn.close()


@pytest.mark.parametrize("reset_in_commit", [False, True], ids=["pool-reset", "reset-in-commit"])
async def test_a_batch_whose_transaction_a_handler_left_aborted_is_not_reported_committed(
    database_url: str, reset_in_commit: bool
) -> None:
    """A handler that catches a failed statement of its own without a savepoint leaves the
    batch's transaction aborted; PostgreSQL then answers its ``COMMIT`` with ``ROLLBACK`` and no
    error (asyncpg's ``Transaction.commit()`` does not look). The batch must not be reported
    applied: nothing of it (neither its dedup rows nor its effects) was committed, and the
    engine would commit its offsets — the events lost. With a stale mark in the COMMIT's message
    the same batch fails (the mark is refused in the aborted transaction); without one it must
    fail too."""

    async def swallowed(conn: asyncpg.Connection) -> None:
        # a handler's mistake: no savepoint around its statement
        with contextlib.suppress(asyncpg.DivisionByZeroError):
            await conn.execute("SELECT 1 / 0")

    key = _key()
    handler = Sorting(set(), set(), swallowed)
    async with _batches(handler, database_url, reset_in_commit=reset_in_commit) as (
        transaction,
        watch,
    ):
        outcome = await transaction.apply([_delivery(key, 1)])
        # The connection goes back clean and the next batch on it commits.
        handler.inside = None
        again = _key()
        assert (await transaction.apply([_delivery(again, 2)])).fresh == 1
    assert await _outcomes(database_url, [again]) == {again: "applied"}
    assert watch.loop_errors == []
    stored = await _outcomes(database_url, [key])
    # Either the delivery was applied (its dedup row committed) or it was dead-lettered;
    # reported fresh with nothing stored is an event lost.
    assert outcome.fresh == len(stored), (outcome, stored)
    assert outcome.fresh + len(outcome.failed) == 1, outcome


async def test_the_engines_pool_resets_a_session_in_the_message_of_its_commit(
    database_url: str,
) -> None:
    """The engine's pool (``reset_session``): a batch's COMMIT carries asyncpg's reset query and
    the connection goes back without another message — and what a handler left in the session
    (a setting, a session advisory lock, a LISTEN) is undone as the pool's own reset undoes it:
    the next batch on the same connection finds none of it, and the lock is free at once."""
    left: dict[str, Any] = {}

    async def leaves_state(conn: asyncpg.Connection) -> None:
        await conn.execute("SET application_name = 'left-behind'")
        await conn.execute("SELECT pg_advisory_lock(4242)")
        await conn.execute("LISTEN left_behind")
        left["pid"] = conn.get_server_pid()

    async def finds_state(conn: asyncpg.Connection) -> None:
        left["after"] = (
            conn.get_server_pid(),
            await conn.fetchval("SHOW application_name"),
            await conn.fetchval("SELECT count(*) FROM pg_listening_channels()"),
        )

    applied, stale = _key(), _key()
    handler = Sorting({stale}, set(), leaves_state)
    async with _batches(handler, database_url, reset_in_commit=True) as (transaction, watch):
        await transaction.apply([_delivery(applied, 1), _delivery(stale, 2)])
        observer = await asyncpg.connect(database_url)
        try:
            held = await observer.fetchval(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242"
            )
        finally:
            await observer.close()
        handler.inside, handler.stale = finds_state, set()
        await transaction.apply([_delivery(_key(), 3)])
    assert held == 0
    assert left["after"] == (left["pid"], "", 0)
    reset = "RESET ALL;"
    first = next(i for i, q in enumerate(watch.everything) if "BEGIN" in q)
    last = max(i for i, q in enumerate(watch.everything) if "COMMIT;" in q)
    batches = watch.everything[first : last + 1]
    commits = [q for q in batches if "COMMIT;" in q]
    assert len(commits) == 2
    # The reset right after the COMMIT, in its message.
    assert all(q.index("COMMIT;") < q.index(reset) for q in commits), commits
    # Only the COMMITs reset: no message of its own for the pool's reset between the batches
    # (before them and after them the test itself borrows the connection: the pool resets it).
    assert [q for q in batches if reset in q] == commits, batches
    assert commits[0].index("dedup_mark_stale") < commits[0].index("COMMIT;")
    assert "dedup_mark_stale" not in commits[1]  # no outcome: an empty SELECT before the COMMIT
    assert commits[1].lstrip().startswith("SELECT;"), commits[1]
    assert await _outcomes(database_url, [applied, stale]) == {
        applied: "applied",
        stale: "stale",
    }
    assert watch.loop_errors == []


async def test_the_engines_pool_resets_a_connection_given_back_without_a_commit(
    database_url: str,
) -> None:
    """``reset_session`` skips the reset only after a batch's COMMIT carried it: a connection
    lent for anything else (a dead letter's fallback, a probe) and one whose batch failed go
    through asyncpg's reset query."""
    lender = await PoolConnections.open(database_url, max_size=1)
    pool = lender.pool
    try:
        async with lender.lend() as conn:
            await conn.execute("SET application_name = 'left-behind'")
            pid = conn.get_server_pid()
        async with lender.lend() as conn:
            assert conn.get_server_pid() == pid
            assert await conn.fetchval("SHOW application_name") == ""
    finally:
        await pool.close()


async def test_a_commit_that_carries_the_reset_runs_with_the_transactions_own_settings(
    database_url: str,
) -> None:
    """The reset goes after the ``COMMIT``, not before it: what runs at the commit (a deferred
    constraint trigger here) still sees the transaction's ``SET LOCAL`` settings, as it does
    when the pool resets the session later."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            f"""
            CREATE SCHEMA commit_probe;
            CREATE TABLE commit_probe.seen (setting text);
            CREATE TABLE commit_probe.written (v text);
            CREATE FUNCTION commit_probe.note() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                INSERT INTO commit_probe.seen VALUES (current_setting('commit_probe.who', true));
                RETURN NULL;
            END $$;
            CREATE CONSTRAINT TRIGGER noted AFTER INSERT ON commit_probe.written
                DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION commit_probe.note();
            GRANT USAGE ON SCHEMA commit_probe TO {PROJECTOR};
            GRANT SELECT, INSERT ON commit_probe.written, commit_probe.seen TO {PROJECTOR};
            """
        )
    finally:
        await conn.close()

    async def local_setting(conn: asyncpg.Connection) -> None:
        await conn.execute("SET LOCAL commit_probe.who = 'the batch'")
        await conn.execute(f"INSERT INTO {PROBE} VALUES ('one')")

    handler = Sorting(set(), set(), local_setting)
    async with _batches(handler, database_url, reset_in_commit=True) as (transaction, watch):
        outcome = await transaction.apply([_delivery(_key(), 1)])
    assert (outcome.fresh, len(outcome.failed)) == (1, 0)
    conn = await asyncpg.connect(database_url)
    try:
        assert [
            r["setting"] for r in await conn.fetch("SELECT setting FROM commit_probe.seen")
        ] == ["the batch"]
    finally:
        await conn.close()
    assert watch.loop_errors == []
