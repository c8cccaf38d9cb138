"""One batch's transaction: the dedup record and the handler's effect, committed together.

``BatchTransaction.apply`` runs the batch in one transaction (the named statements of
queries.sql: ``claim_keys``, then the handler, then ``mark_stale`` / ``forget``; keys in their
stored form, keys.py); when the handler fails for a data reason it falls back to one
transaction per delivery, so only the bad delivery fails (it is dead-lettered as
``handler_error``) and the results of the others are merged — their ``carry`` included. Faults
of the infrastructure are retried, never dead-lettered; so is a claim that lost a race (another
member inserted one of the batch's keys and committed while this claim waited for it: the retry
finds the key, a duplicate). A privilege the database refuses (the deployment's role lacks a
grant, or its consumer name is not registered in ``core.consumer_roles``, so row-level security
refuses its dedup rows) is the deployment's configuration, never a record's: the batch rolls
back, nothing is dead-lettered and the engine stops with a
:class:`~spectral.errors.ConfigurationError` saying what to grant.

A batch that commits sends its stale marks (or rejected keys), when they are few, in the same
message as its ``COMMIT``: one round trip less before the commit, which the next batch waits
for (at 10,000 events/s most batches mark a few stale keys). The transaction is still asyncpg's
``Transaction`` (a handler's own ``conn.transaction()`` inside it is a savepoint, as always);
only its commit is sent by :func:`_commit_with`, which ends it as ``Transaction.commit`` does.
The engine's pool resets a session in the same message, right after the ``COMMIT``
(:func:`reset_session`): the connection goes back to the pool without one more round trip.

Connections come from a :class:`Connections` lender: the engine's pool (each batch commits), a
:class:`~spectral.replay.held_transaction.HeldTransaction` (each batch a savepoint of one
transaction held across the run: nothing commits per batch) or a :class:`BorrowedConnection`
(a test's own connection, inside its transaction).
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar, cast

import asyncpg
from asyncpg.transaction import Transaction, TransactionState

from contracts import RefusalReason
from spectral.db.connect import create_pool
from spectral.db.queries import load_queries
from spectral.engine.handler import Delivery, Handler, HandlerResult
from spectral.engine.keys import dedup_keys
from spectral.engine.retrying import Retrying
from spectral.errors import ConfigurationError, PermanentError, SpectralError, TransientError
from spectral.faults import describe, is_transient
from spectral.kafka.dlq import DeadLetter
from spectral.observability.logging import get_logger

log = get_logger(__name__)

_SQL: Final = load_queries(Path(__file__).with_name("queries.sql"))

_T = TypeVar("_T")

WITH_COMMIT_KEYS = 64
"""Stale or rejected keys of a batch sent as literals in the message of its COMMIT, at most: a
batch keeping up with a live stream has a few (one round trip less before its commit); a
backlog's large batches send theirs as the prepared statement's array, whose binary form
PostgreSQL reads faster than literals (every list as literals at 2,000-record batches: 11.75 ->
13.0 us of PostgreSQL CPU per event), and there the round trip is shared by 2,000 records."""


def _literal(text: str) -> str:
    """``text`` as an SQL string literal: an E'' literal, read the same whatever
    ``standard_conforming_strings`` says."""
    return "E'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def _bytea(keys: list[bytes]) -> str:
    """``keys`` as an SQL ``bytea[]`` literal: one E'' string of their hex forms, read by the
    array's input function (no statement node per key)."""
    # Each backslash doubled twice: once for the E'' string, once for the array's input.
    return "E'{" + ",".join(f"\\\\\\\\x{key.hex()}" for key in keys) + "}'::bytea[]"


_RESET_BY_COMMIT: Final[weakref.WeakSet[asyncpg.Connection]] = weakref.WeakSet()
"""Connections whose last message was a COMMIT that carried the session's reset."""


async def reset_session(conn: asyncpg.Connection) -> None:
    """The engine pool's reset (asyncpg's ``create_pool(reset=...)``, run when a connection is
    given back): asyncpg's reset query (advisory locks, cursors, LISTENs, session settings), but
    not for a connection whose batch committed with that query in its COMMIT's message
    (:class:`PoolConnections` with ``reset_in_commit``): nothing ran on it since, so its
    session is already reset, and the round trip is saved. Before that query asyncpg rolled
    back an open transaction and dropped the connection's listeners, as it always does."""
    if conn in _RESET_BY_COMMIT:
        _RESET_BY_COMMIT.discard(conn)
        return
    if query := conn.get_reset_query():
        await conn.execute(query)


async def _commit_with(transaction: Transaction, statements: str, *, reset: bool = False) -> None:
    """Commit ``transaction`` (top level, started by ``start()``) with ``statements`` run first,
    in the same simple-protocol message as its ``COMMIT``; ``reset``: the session's reset
    query (asyncpg's, :func:`reset_session`) right after the ``COMMIT``, in that message too
    (what a handler left in its session is undone as the pool's reset undoes it, and the
    ``COMMIT`` runs with the transaction's settings, ``SET LOCAL`` ones included, as before).

    asyncpg's ``Transaction.commit()`` sends a fixed ``COMMIT;``; this sends the longer message
    and leaves the ``Transaction`` and its connection as ``commit()`` does (asyncpg 0.30-0.32,
    ``Transaction.__commit``): the connection's top-level transaction is cleared (so the next
    ``conn.transaction()`` is a transaction, not a savepoint, and the pool's reset finds nothing
    open), and the ``Transaction`` ends COMMITTED — FAILED if the message fails, when the caller
    rolls back what the server still holds open (a statement before the ``COMMIT`` failed:
    PostgreSQL skips the rest of the message). Unlike ``commit()`` it knows the COMMIT's answer:
    a transaction already aborted (a handler caught a failed statement without a savepoint) is
    answered ``ROLLBACK`` without an error, and that raises :class:`PermanentError`. With the
    reset behind it the message's status is the reset's, so a statement goes before the
    ``COMMIT`` (the outcome statements, else an empty ``SELECT``): PostgreSQL refuses it in an
    aborted transaction, which raises the same error and leaves the server's transaction for
    the caller to roll back. tests/integration/engine/test_commit_message.py holds the
    installed asyncpg to this."""
    state: Any = transaction  # asyncpg's own bookkeeping: no public way to end it otherwise
    connection = state._connection  # noqa: SLF001 - the real connection, not a pool proxy
    if connection._top_xact is transaction:  # noqa: SLF001
        connection._top_xact = None  # noqa: SLF001
    query = connection.get_reset_query() if reset else ""
    message = f"{statements or 'SELECT;'}\nCOMMIT;\n{query}" if query else statements + "COMMIT;"
    try:
        status = await connection.execute(message)
    except asyncpg.InFailedSQLTransactionError as exc:
        state._state = TransactionState.FAILED  # noqa: SLF001
        raise PermanentError(_aborted("refused the statements before its COMMIT")) from exc
    except BaseException:
        state._state = TransactionState.FAILED  # noqa: SLF001
        raise
    if not query and status != "COMMIT":
        # PostgreSQL answers the COMMIT of an aborted transaction (a statement failed and was
        # caught without a savepoint) with ROLLBACK and no error: nothing was committed.
        state._state = TransactionState.ROLLEDBACK  # noqa: SLF001
        raise PermanentError(_aborted(f"answered its COMMIT with {status}"))
    state._state = TransactionState.COMMITTED  # noqa: SLF001
    if query:
        _RESET_BY_COMMIT.add(connection)


async def _committed_or_rolled_back(
    conn: asyncpg.Connection,
    transaction: Transaction,
    work: Callable[[], Awaitable[tuple[_T, str]]],
    *,
    reset: bool,
) -> _T:
    """``work`` in ``transaction`` (started on ``conn``), then its ``COMMIT`` with the statements
    ``work`` gave sent in the same message (:func:`_commit_with`); rolled back when either
    fails (else the pool's reset rolls it back)."""
    try:
        value, ending = await work()
    except BaseException:
        with contextlib.suppress(Exception):
            await transaction.rollback()
        raise
    try:
        await _commit_with(transaction, ending, reset=reset)
    except BaseException:
        if not conn.is_closed() and conn.is_in_transaction():
            with contextlib.suppress(Exception):
                await conn.execute("ROLLBACK;")
        raise
    return value


def _aborted(answer: str) -> str:
    return (
        "the batch's transaction was aborted (a statement failed and was caught without a "
        f"savepoint); PostgreSQL {answer}: nothing was committed"
    )


class Connections(Protocol):
    """Lends the connection a batch runs on."""

    @property
    def commits(self) -> bool:
        """True when leaving a batch's transaction block commits it (False: a savepoint)."""

    def lend(self) -> AbstractAsyncContextManager[asyncpg.Connection]: ...


class PoolConnections:
    """A connection of the engine's pool per batch: every batch commits.

    A connection that comes back whole goes back to the pool behind the borrower: the pool's
    reset of its session is not part of the batch, and the next batch's transaction starts on
    another connection meanwhile. One whose block raised is reset before the error goes on.
    ``reset_in_commit`` (a pool created with ``reset=``:func:`reset_session`): a batch's COMMIT
    carries that reset, and the pool's reset then costs no round trip."""

    commits = True

    def __init__(self, pool: asyncpg.Pool, *, reset_in_commit: bool = False) -> None:
        self._pool = pool
        self.reset_in_commit = reset_in_commit
        self._releasing: set[asyncio.Task[None]] = set()

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        role: str | None = None,
        min_size: int = 1,
        max_size: int = 4,
        session: Mapping[str, str] | None = None,
    ) -> PoolConnections:
        """A new pool lent batch by batch as the engine lends its own: created with
        :func:`reset_session` as its reset and lent with ``reset_in_commit``, the two halves of
        the saving (either alone is correct, and saves nothing); the other arguments are
        :func:`~spectral.db.connect.create_pool`'s."""
        pool = await create_pool(
            dsn,
            role=role,
            min_size=min_size,
            max_size=max_size,
            session=session,
            reset=reset_session,
        )
        return cls(pool, reset_in_commit=True)

    @property
    def pool(self) -> asyncpg.Pool:
        """The pool lent from."""
        return self._pool

    @asynccontextmanager
    async def lend(self) -> AsyncIterator[asyncpg.Connection]:
        conn = await self._pool.acquire()
        try:
            # A pool connection proxy behaves as the connection it lends.
            yield cast("asyncpg.Connection", conn)
        except BaseException:
            await self._pool.release(conn)
            raise
        task = asyncio.create_task(self._release(conn))
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    async def _release(self, conn: asyncpg.pool.PoolConnectionProxy) -> None:
        # A reset that fails closes the connection; the pool opens another when it needs one.
        with contextlib.suppress(Exception):
            await self._pool.release(conn)


class BorrowedConnection:
    """The caller's own connection for every batch (spectral.testing's in-memory runs): inside
    the caller's open transaction each batch is a savepoint and nothing commits; without one,
    each batch commits. One batch at a time uses it (a dead letter's table fallback waits for
    the next batch's transaction)."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn
        self._turn = asyncio.Lock()

    @property
    def commits(self) -> bool:
        return not self.conn.is_in_transaction()

    @asynccontextmanager
    async def lend(self) -> AsyncIterator[asyncpg.Connection]:
        async with self._turn:
            yield self.conn


_Finish = Callable[[asyncpg.Connection, Sequence[Delivery]], Awaitable[HandlerResult[Any]]]
"""What a handler's work ahead of the claim returned (:meth:`Handler.ahead`)."""


def _resets_in_commit(connections: Connections) -> bool:
    """Whether a batch's ``COMMIT`` carries the session's reset (:class:`PoolConnections`)."""
    return isinstance(connections, PoolConnections) and connections.reset_in_commit


async def _begun(conn: asyncpg.Connection) -> Transaction:
    """A batch's transaction, started: READ COMMITTED whatever the session's default, as the
    claim must read the dedup ring with a snapshot taken after its lock (a claim that waited
    for a rotation reads the new current slot; queries.sql claim_keys), not the transaction's
    first one."""
    transaction = conn.transaction(isolation="read_committed")
    await transaction.start()
    return transaction


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """What became of a batch's deliveries."""

    result: HandlerResult[Any]
    fresh: int
    """Deliveries new for the consumer (applied, stale or rejected)."""
    duplicates: int
    failed: tuple[DeadLetter, ...]
    """Dead letters: rejected by the handler, or failing alone (``handler_error``)."""
    claimed_early: bool = False
    """Its claim ran beside the batch before it (:meth:`BatchTransaction.apply_claimed`)."""

    @property
    def holds_all(self) -> bool:
        """Every key of the batch is held once it committed: none was rejected (a rejected
        key is forgotten) or failed alone (its transaction rolled back)."""
        return not self.failed and not self.result.rejected


@dataclass(slots=True)
class EarlyClaim:
    """A batch's transaction, open on a connection of its own with its keys claimed, while the
    batch before it is still in its transaction (:meth:`BatchTransaction.claim_early`)."""

    deliveries: Sequence[Delivery]
    fresh: list[Delivery]
    """The deliveries the claim found new, less those of the batch before (``assumed``)."""
    finish: _Finish | None
    conn: asyncpg.Connection
    transaction: Transaction
    lease: contextlib.AsyncExitStack
    """Gives the connection back (its ``aclose``)."""


async def _claim(
    conn: asyncpg.Connection, name: str, stored: list[bytes], batch: list[Delivery]
) -> list[bytes]:
    """The claim (queries.sql ``claim_keys``): the keys consumer ``name`` already held.
    A unique violation means a concurrent transaction inserted one of these keys and committed
    while this one waited for it: a fault of the moment, retried (the retry finds the key)."""
    try:
        held: list[bytes] = await conn.fetchval(
            _SQL["claim_keys"],
            name,
            stored,
            [d.event_id for d in batch],
            [d.partition for d in batch],
            [d.offset for d in batch],
        )
    except asyncpg.UniqueViolationError as exc:
        raise TransientError(f"a key of the batch was claimed concurrently: {exc}") from exc
    return held


def _unique(deliveries: Sequence[Delivery]) -> dict[str, Delivery]:
    """Each delivery by its idempotency key: the first of a key wins inside a batch, later ones
    are duplicates."""
    unique: dict[str, Delivery] = {}
    for delivery in deliveries:
        unique.setdefault(delivery.idempotency_key, delivery)
    return unique


def _works_ahead(handler: Handler[Any]) -> bool:
    """Whether ``handler`` does work ahead of the claim (Handler.ahead): its ``ahead`` is not the
    default and belongs with its ``apply`` — defined by the class that defines ``apply``, or by
    a subclass of it. A subclass that overrides only ``apply`` of a handler that works ahead is
    applied through its own ``apply``, as it expects."""
    mro = type(handler).__mro__
    ahead = next(c for c in mro if "ahead" in vars(c))
    apply = next(c for c in mro if "apply" in vars(c))
    return ahead is not Handler and issubclass(ahead, apply)


async def _claim_ahead(
    conn: asyncpg.Connection,
    name: str,
    stored: list[bytes],
    batch: list[Delivery],
    handler: Handler[Any],
) -> tuple[list[bytes], _Finish | None]:
    """The claim (:func:`_claim`), with the handler's database-free work (``ahead``) done while
    the database runs it: the claim's messages leave first (one pass of the event loop lets its
    task write them and wait for the answer), then ``ahead`` computes. An exception of
    ``ahead`` is raised once the claim has answered (the connection is then free, and the
    transaction is rolled back as after any failure of the handler); a cancellation cancels the
    claim and waits for it to end first."""
    claim = asyncio.ensure_future(_claim(conn, name, stored, batch))
    try:
        await asyncio.sleep(0)
        finish = handler.ahead(batch)
    except BaseException as exc:
        if not isinstance(exc, Exception):  # cancelled (a stop): the claim is too
            claim.cancel()
        await asyncio.wait([claim])  # ended: nothing left running on the connection
        if not claim.cancelled():
            claim.exception()  # retrieved: the failure that counts is this one
        raise
    return await claim, finish


async def _outcome(
    conn: asyncpg.Connection,
    statement: str,
    name: str,
    keys: list[bytes],
    ending: list[str] | None,
) -> None:
    """Outcome statement ``statement`` (``mark_stale``, ``forget``) of ``keys``: added to
    ``ending`` (the message of the COMMIT) as literals when they are few, run now otherwise
    (always, without an ``ending``: a batch that does not commit)."""
    if ending is not None and len(keys) <= WITH_COMMIT_KEYS:
        ending.append(_SQL[f"{statement}_literal"].format(_literal(name), _bytea(keys)) + "\n")
    else:
        await conn.execute(_SQL[statement], name, keys)


async def _outcomes(
    conn: asyncpg.Connection, name: str, result: HandlerResult[Any], ending: list[str] | None
) -> None:
    """The batch's stale marks and rejected keys (:func:`_outcome`)."""
    if result.stale:
        await _outcome(conn, "mark_stale", name, dedup_keys(sorted(result.stale)), ending)
    if result.rejected:
        rejected = [r.delivery.idempotency_key for r in result.rejected]
        await _outcome(conn, "forget", name, dedup_keys(rejected), ending)


class BatchTransaction:
    def __init__(self, handler: Handler[Any], connections: Connections, retrying: Retrying) -> None:
        self._handler = handler
        self._connections = connections
        self._retrying = retrying
        self._works_ahead = _works_ahead(handler)
        self._ahead = True  # the next claim runs beside the handler's work (Handler.ahead)

    async def apply(self, deliveries: Sequence[Delivery]) -> BatchOutcome:
        """Apply the batch in one transaction; fall back to one-by-one on a data error."""
        unique = _unique(deliveries)
        failed: list[DeadLetter] = []
        try:
            result, fresh = await self._retrying("database", lambda: self._run(unique))
        except ConfigurationError:
            raise
        except PermanentError as exc:
            log.warning("batch failed for a data reason; applying one by one", error=str(exc))
            result, fresh, failed = await self._one_by_one(unique)
        return self._outcome(deliveries, result, fresh, failed)

    def _outcome(
        self,
        deliveries: Sequence[Delivery],
        result: HandlerResult[Any],
        fresh: int,
        failed: list[DeadLetter],
    ) -> BatchOutcome:
        duplicates = len(deliveries) - fresh - len(failed)
        failed.extend(
            DeadLetter.of(
                r.delivery,
                consumer=self._handler.name,
                reason=RefusalReason.HANDLER_REJECTED,
                detail=f"{r.reason}: {r.detail}",
            )
            for r in result.rejected
        )
        return BatchOutcome(result, fresh, duplicates, tuple(failed))

    async def claim_early(
        self, deliveries: Sequence[Delivery], before: Collection[str]
    ) -> EarlyClaim | None:
        """Open the batch's transaction and claim its keys while the batch before it (whose
        idempotency keys are ``before``) is still in its own: PostgreSQL runs this claim
        beside that batch's handler and commit, on a second connection. Its keys that the
        batch before holds are left out of the claim — they are that batch's, held once it
        commits (a claim of them would wait for that commit, then fail on the key) — and
        counted as duplicates by :meth:`apply_claimed`, which the engine calls only after that
        batch committed holding every key (:attr:`BatchOutcome.holds_all`); otherwise it
        rolls this back (:meth:`abandon`) and applies the batch anew. Only where batches commit on a
        pool's connections; None there is nothing to claim early, or the claim failed (the
        batch is then applied as usual, with its retries, after the batch before)."""
        connections = self._connections
        if not isinstance(connections, PoolConnections) or not connections.commits:
            return None
        unique = _unique(deliveries)
        batch = [d for key, d in unique.items() if key not in before]
        lease = contextlib.AsyncExitStack()
        try:
            conn = await lease.enter_async_context(connections.lend())
            transaction = await _begun(conn)
            try:
                stored = dedup_keys([d.idempotency_key for d in batch])
                fresh, finish = await self._claimed(conn, self._handler.name, stored, batch)
            except BaseException:
                with contextlib.suppress(Exception):
                    await transaction.rollback()
                raise
        except Exception as exc:  # noqa: BLE001 - applied as usual after the batch before
            log.info("claim ahead of the commit before it failed", error=describe(exc))
            with contextlib.suppress(Exception):
                await lease.aclose()
            return None
        except BaseException:
            with contextlib.suppress(Exception):
                await lease.aclose()
            raise
        return EarlyClaim(deliveries, fresh, finish, conn, transaction, lease)

    async def apply_claimed(self, early: EarlyClaim) -> BatchOutcome:
        """Finish a batch claimed early (:meth:`claim_early`) once the batch before it
        committed holding every key: the handler on the fresh deliveries, the outcome
        statements, the commit. If that fails in any way the transaction is rolled back and
        the batch applied as usual (:meth:`apply`: retries, one by one); a commit whose answer
        was lost is then found by its claim, as a retry finds it."""
        try:
            result = await self._finish_claimed(early, reset=_resets_in_commit(self._connections))
        except Exception as exc:  # noqa: BLE001 - applied again as usual
            log.info("batch claimed ahead failed; applying it again", error=describe(exc))
            return await self.apply(early.deliveries)
        outcome = self._outcome(early.deliveries, result, len(early.fresh), [])
        return replace(outcome, claimed_early=True)

    async def _finish_claimed(self, early: EarlyClaim, *, reset: bool) -> HandlerResult[Any]:
        """:meth:`apply_claimed`'s transaction, committed (as :meth:`_committed` does), its
        connection given back whatever happened."""
        conn = early.conn

        async def work() -> tuple[HandlerResult[Any], str]:
            result = await self._applied(conn, early.fresh, early.finish)
            ending: list[str] = []
            await _outcomes(conn, self._handler.name, result, ending)
            return result, "".join(ending)

        try:
            return await _committed_or_rolled_back(conn, early.transaction, work, reset=reset)
        finally:
            await early.lease.aclose()

    @staticmethod
    async def abandon(early: EarlyClaim) -> None:
        """Roll back a batch claimed early and give its connection back."""
        try:
            with contextlib.suppress(Exception):  # else the pool's reset rolls it back
                await early.transaction.rollback()
        finally:
            with contextlib.suppress(Exception):
                await early.lease.aclose()

    async def _run(self, unique: dict[str, Delivery]) -> tuple[HandlerResult[Any], int]:
        """One transaction: claim the keys (``unique``: each delivery by its idempotency key),
        apply the fresh deliveries, record the outcomes."""
        name = self._handler.name
        batch = list(unique.values())
        try:
            stored = dedup_keys(list(unique))
            connections = self._connections
            async with connections.lend() as conn:
                if connections.commits:
                    reset = _resets_in_commit(connections)
                    return await self._committed(conn, name, stored, batch, reset=reset)
                async with conn.transaction():
                    fresh, result = await self._claimed_and_applied(conn, name, stored, batch)
                    await _outcomes(conn, name, result, None)
        except SpectralError:
            raise
        except Exception as exc:
            if is_transient(exc):
                raise TransientError(f"{type(exc).__name__}: {exc}") from exc
            if isinstance(exc, asyncpg.InsufficientPrivilegeError):
                raise self._refused_privilege(exc) from exc
            raise PermanentError(f"{type(exc).__name__}: {exc}") from exc
        return result, len(fresh)

    async def _claimed_and_applied(
        self, conn: asyncpg.Connection, name: str, stored: list[bytes], batch: list[Delivery]
    ) -> tuple[list[Delivery], HandlerResult[Any]]:
        """Inside the transaction: the claim, then the handler on the fresh deliveries —
        finishing what it worked out on the whole batch while the claim ran
        (:meth:`Handler.ahead`), when it did."""
        fresh, finish = await self._claimed(conn, name, stored, batch)
        return fresh, await self._applied(conn, fresh, finish)

    async def _claimed(
        self, conn: asyncpg.Connection, name: str, stored: list[bytes], batch: list[Delivery]
    ) -> tuple[list[Delivery], _Finish | None]:
        """The claim of ``batch`` (``stored``: its keys), with the handler's work ahead of it
        when it does some: the deliveries it found new, and what finishes the handler's work."""
        handler = self._handler
        if self._ahead and self._works_ahead:
            held, finish = await _claim_ahead(conn, name, stored, batch, handler)
        else:
            held, finish = await _claim(conn, name, stored, batch), None
        # A claim that found most keys held (a redelivery) makes the next batch's likely to as
        # well: the handler's work ahead of it would mostly be for duplicates.
        self._ahead = 2 * len(held) <= len(batch)
        if held:
            known = set(held)
            return [d for key, d in zip(stored, batch, strict=True) if key not in known], finish
        return batch, finish

    async def _applied(
        self, conn: asyncpg.Connection, fresh: list[Delivery], finish: _Finish | None
    ) -> HandlerResult[Any]:
        """The handler on the deliveries its claim found new."""
        if not fresh:
            return HandlerResult()
        if finish is not None:
            return await finish(conn, fresh)
        return await self._handler.apply(conn, fresh)

    async def _committed(
        self,
        conn: asyncpg.Connection,
        name: str,
        stored: list[bytes],
        batch: list[Delivery],
        *,
        reset: bool,
    ) -> tuple[HandlerResult[Any], int]:
        """The batch's transaction where it commits: the claim and the handler, then the outcome
        statements, when they are few, and (``reset``) the session's reset in the message of the
        ``COMMIT`` (:func:`_commit_with`)."""
        transaction = await _begun(conn)

        async def work() -> tuple[tuple[HandlerResult[Any], int], str]:
            fresh, result = await self._claimed_and_applied(conn, name, stored, batch)
            ending: list[str] = []
            await _outcomes(conn, name, result, ending)
            return (result, len(fresh)), "".join(ending)

        return await _committed_or_rolled_back(conn, transaction, work, reset=reset)

    def _refused_privilege(self, exc: asyncpg.InsufficientPrivilegeError) -> ConfigurationError:
        role = self._handler.database_role or "the login's own role"
        return ConfigurationError(
            f"consumer {self._handler.name}: the database refused a privilege to {role} ({exc}). "
            f"Grant the deployment's role what its statements need (GRANT spectral_consumer TO "
            f"{role}; its own tables) and register its consumer name (INSERT INTO "
            f"core.consumer_roles VALUES ('{self._handler.name}', '{role}')); nothing was "
            "applied or dead-lettered"
        )

    async def _one_by_one(
        self, unique: dict[str, Delivery]
    ) -> tuple[HandlerResult[Any], int, list[DeadLetter]]:
        """Each delivery in its own transaction: (merged result, fresh, failed)."""
        merged: HandlerResult[Any] = HandlerResult()
        fresh_total = 0
        failed: list[DeadLetter] = []
        for key, delivery in unique.items():
            try:
                result, fresh = await self._retrying(
                    "database",
                    lambda k=key, d=delivery: self._run({k: d}),  # type: ignore[misc]
                )
            except ConfigurationError:
                raise
            except PermanentError as exc:
                failed.append(
                    DeadLetter.of(
                        delivery,
                        consumer=self._handler.name,
                        reason=RefusalReason.HANDLER_ERROR,
                        detail=str(exc),
                    )
                )
                continue
            fresh_total += fresh
            merged = merged.merge(result)
        return merged, fresh_total, failed
