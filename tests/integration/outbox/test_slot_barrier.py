"""The outbox slot a writer's rows go to, against outbox rotations (migrations bounded_state and
outbox_slot_per_statement): read once per INSERT statement, yet no row ever joins a generation
after it ended, whatever a writer's transaction does around a rotation — and none is lost when
ended generations are emptied behind them."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from datetime import timedelta

import asyncpg
import pytest

from spectral.maintenance.policy import OUTBOX_SLOTS, OutboxGeneration
from spectral.maintenance.repository import MaintenanceRepository
from spectral.outbox.writer import OutboxItem, enqueue
from tests.integration.maintenance.support import session
from tests.integration.outbox.relay.support import key_id, numbered

pytestmark = pytest.mark.integration

WRITER = "spectral_producer"
WAIT = timedelta(seconds=30)

# Recorded at each row's commit, in the writer's transaction (a deferred constraint trigger: it
# runs once the transaction's statements are done, still under its locks): a row whose slot is
# not the current generation's then has joined a generation that ended before it committed.
WATCH = """
CREATE TABLE public.late_rows (id bigint, slot smallint, current_slot smallint);
CREATE FUNCTION public.late_row() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $fn$
DECLARE
    current_slot smallint;
BEGIN
    SELECT g.slot INTO current_slot FROM core.outbox_generations AS g WHERE g.ended_at IS NULL;
    IF current_slot IS DISTINCT FROM NEW.slot THEN
        INSERT INTO public.late_rows VALUES (NEW.id, NEW.slot, current_slot);
    END IF;
    RETURN NULL;
END
$fn$;
CREATE CONSTRAINT TRIGGER late_row AFTER INSERT ON core.outbox
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.late_row();
"""


def _items(count: int, first: int = 0) -> list[OutboxItem]:
    keys = [key_id(first + i) for i in range(count)]
    return [OutboxItem(numbered(key, 1), str(key)) for key in keys]


async def _slots(database_url: str, ids: list[int]) -> list[int]:
    async with session(database_url) as admin:
        rows = await admin.fetch(
            "SELECT slot FROM core.outbox WHERE id = ANY($1::bigint[]) ORDER BY id", ids
        )
    assert len(rows) == len(ids)
    return [int(r["slot"]) for r in rows]


async def _current(repo: MaintenanceRepository) -> OutboxGeneration:
    [current] = [g for g in await repo.outbox_generations() if g.ended_at is None]
    return current


async def test_a_statements_rows_share_the_current_slot_and_the_next_statement_reads_it_anew(
    database_url: str,
) -> None:
    repo = await MaintenanceRepository.open(database_url)
    try:
        async with session(database_url, WRITER) as writer:
            async with writer.transaction():
                before = await enqueue(writer, _items(30))
            await repo.rotate_outbox(await _current(repo), 1, WAIT)
            async with writer.transaction():
                after = await enqueue(writer, _items(3))
            async with writer.transaction():  # a statement of one row, twice in a transaction
                one = await enqueue(writer, _items(1)) + await enqueue(writer, _items(1))
    finally:
        await repo.close()
    assert await _slots(database_url, before) == [0] * 30
    assert await _slots(database_url, after + one) == [1] * 5


async def test_a_transaction_open_across_a_rotation_keeps_its_generation_until_it_commits(
    database_url: str,
) -> None:
    repo = await MaintenanceRepository.open(database_url)
    try:
        async with (
            session(database_url, WRITER) as writer,
            session(database_url, WRITER) as other,
        ):
            transaction = writer.transaction()
            await transaction.start()
            first = await enqueue(writer, _items(2))
            rotating = asyncio.create_task(repo.rotate_outbox(await _current(repo), 1, WAIT))
            await asyncio.sleep(0.5)
            assert not rotating.done()  # waits for the writer's transaction
            second = await enqueue(writer, _items(2))  # generation 1 is still current
            queued = asyncio.create_task(enqueue(other, _items(2)))  # its own transaction
            await asyncio.sleep(0.5)
            assert not queued.done()  # behind the rotation
            await transaction.commit()
            await asyncio.wait_for(rotating, 30)
            behind = await asyncio.wait_for(queued, 30)
            async with writer.transaction():  # the same session, its next transaction
                next_one = await enqueue(writer, _items(1))
    finally:
        await repo.close()
    assert await _slots(database_url, first + second) == [0] * 4
    assert await _slots(database_url, behind + next_one) == [1] * 3


async def test_a_savepoint_rolled_back_gives_its_lock_back_and_the_next_statement_reads_again(
    database_url: str,
) -> None:
    """The rows of a rolled-back savepoint leave with its lock: a rotation can then pass while
    the transaction goes on, and its next statement goes to the new slot."""
    repo = await MaintenanceRepository.open(database_url)
    try:
        async with session(database_url, WRITER) as writer:
            transaction = writer.transaction()
            await transaction.start()
            savepoint = writer.transaction()
            await savepoint.start()
            await enqueue(writer, _items(2))  # slot 0, then undone
            await savepoint.rollback()
            await asyncio.wait_for(
                repo.rotate_outbox(await _current(repo), 1, timedelta(seconds=5)), 10
            )
            kept = await enqueue(writer, _items(2))
            await transaction.commit()
    finally:
        await repo.close()
    assert await _slots(database_url, kept) == [1, 1]


async def test_a_writer_cannot_pick_the_slot_through_the_setting(database_url: str) -> None:
    repo = await MaintenanceRepository.open(database_url)
    try:
        await repo.rotate_outbox(await _current(repo), 1, WAIT)
    finally:
        await repo.close()
    async with session(database_url, WRITER) as writer:
        await writer.execute("SELECT set_config('spectral.outbox_slot', '0', false)")
        async with writer.transaction():
            await writer.execute("SET LOCAL spectral.outbox_slot = '0'")
            ids = await enqueue(writer, _items(2))
    assert await _slots(database_url, ids) == [1, 1]


async def test_without_a_current_generation_an_insert_fails_as_an_infrastructure_fault(
    database_url: str,
) -> None:
    async with session(database_url) as admin:
        await admin.execute("UPDATE core.outbox_generations SET ended_at = now()")
    async with session(database_url, WRITER) as writer:
        with pytest.raises(asyncpg.PostgresError, match="no current generation") as raised:
            await enqueue(writer, _items(1))
    assert raised.value.sqlstate == "57P03"


@dataclass
class _Race:
    """Writers and a rotating maintenance on one database, and what each saw."""

    database_url: str
    rng: random.Random = field(default_factory=lambda: random.Random(26))
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    committed: set[int] = field(default_factory=set)
    published: set[int] = field(default_factory=set)

    async def write(self, number: int) -> int:
        """Transactions of one to three statements, pauses between them, now and then a
        savepoint rolled back first; returns how many committed."""
        transactions = 0
        async with session(self.database_url, WRITER) as conn:
            while not self.stop.is_set():
                ids: list[int] = []
                async with conn.transaction():
                    for _ in range(self.rng.randint(1, 3)):
                        if self.rng.random() < 0.2:
                            savepoint = conn.transaction()
                            await savepoint.start()
                            await enqueue(conn, _items(self.rng.randint(1, 5), number * 1000))
                            await asyncio.sleep(self.rng.random() * 0.003)
                            await savepoint.rollback()
                        ids += await enqueue(conn, _items(self.rng.randint(1, 20), number * 1000))
                        await asyncio.sleep(self.rng.random() * 0.003)
                self.committed.update(ids)
                transactions += 1
        return transactions

    async def rotate(self, rotations: int) -> list[int]:
        """Rotate; publish the ended generation's rows (as a relay would) and empty its slot.
        Returns the rows published per emptied generation, -1 for a slot that could not be
        emptied (an unpublished row turned up in it: it stops there)."""
        pruned: list[int] = []
        repo = await MaintenanceRepository.open(self.database_url)
        try:
            async with session(self.database_url) as admin:
                for _ in range(rotations):
                    await asyncio.sleep(self.rng.uniform(0.02, 0.1))
                    ended = await _current(repo)
                    await repo.rotate_outbox(ended, (ended.slot + 1) % OUTBOX_SLOTS, WAIT)
                    rows = await admin.fetch(
                        "UPDATE core.outbox SET published_at = now() "
                        "WHERE slot = $1 AND published_at IS NULL RETURNING id",
                        ended.slot,
                    )
                    self.published.update(int(r["id"]) for r in rows)
                    await repo.mark_fully_published(ended.generation)
                    if await repo.truncate_outbox(ended, WAIT) < 0:
                        pruned.append(-1)
                        break
                    pruned.append(len(rows))
        finally:
            await repo.close()
            self.stop.set()
        return pruned


async def test_writers_racing_rotations_never_join_an_ended_generation_and_lose_no_row(
    database_url: str,
) -> None:
    """Writers commit transactions of one to three statements (some with a savepoint rolled
    back, pauses between statements) while maintenance rotates the outbox again and again and
    empties each ended generation once its rows are published. Every row committed is then
    either still in the outbox or was published before its slot was emptied; none committed
    into a generation that had ended."""
    async with session(database_url) as admin:
        await admin.execute(WATCH)
    race = _Race(database_url)
    writers = [asyncio.create_task(race.write(n)) for n in range(4)]
    pruned = await asyncio.wait_for(race.rotate(20), 120)
    transactions = await asyncio.wait_for(asyncio.gather(*writers), 60)

    async with session(database_url) as admin:
        late = await admin.fetch("SELECT * FROM public.late_rows")
        present = await admin.fetch("SELECT id, slot FROM core.outbox")
        current = await admin.fetchval(
            "SELECT slot FROM core.outbox_generations WHERE ended_at IS NULL"
        )
    assert [dict(r) for r in late] == []
    assert -1 not in pruned  # no unpublished row turned up in an ended slot
    assert sum(1 for rows in pruned if rows > 0) >= 15  # the writers wrote across the rotations
    assert min(transactions) >= 3  # every writer took part
    left = {int(r["id"]) for r in present}
    assert {int(r["slot"]) for r in present} <= {current}
    assert not left & race.published
    assert left | race.published == race.committed  # nothing lost, nothing rolled back kept


@pytest.mark.parametrize("isolation", ["repeatable_read", "serializable"])
async def test_a_snapshot_isolation_writer_does_not_join_a_generation_that_ended(
    database_url: str, isolation: str
) -> None:
    """``enqueue`` runs in the producer's own transaction, at whatever isolation the producer
    chose. At REPEATABLE READ and SERIALIZABLE a read of the current generation uses the snapshot
    the transaction took before the rotation, so its rows would go to the generation that ended
    (the slot maintenance then checks it as fully published and empties it). The insert is
    refused with the error those levels ask a writer to retry, and nothing is written."""
    repo = await MaintenanceRepository.open(database_url)
    try:
        async with session(database_url, WRITER) as writer:
            transaction = writer.transaction(isolation=isolation)  # type: ignore[arg-type]
            await transaction.start()
            await writer.fetchval("SELECT 1")  # the transaction's snapshot
            before = await _current(repo)
            await asyncio.wait_for(repo.rotate_outbox(before, 1, WAIT), 30)
            with pytest.raises(asyncpg.SerializationError):
                await enqueue(writer, _items(2))
            await transaction.rollback()
            # retried, as the level asks: a new snapshot sees the new generation
            async with writer.transaction(isolation=isolation):  # type: ignore[arg-type]
                ids = await enqueue(writer, _items(2))
        current = await _current(repo)
    finally:
        await repo.close()
    assert (before.slot, current.slot) == (0, 1)
    assert await _slots(database_url, ids) == [1, 1]


async def test_a_snapshot_isolation_writer_whose_first_statement_waited_for_a_rotation_is_refused(
    database_url: str,
) -> None:
    """A transaction's first statement takes its snapshot before it waits for its lock: an
    INSERT that waited behind a rotation's barrier saw the generation that the rotation ended
    as current. It is refused, not written into the ended slot."""
    async with session(database_url) as admin, session(database_url, WRITER) as writer:
        [current] = await admin.fetch(
            "SELECT generation, slot FROM core.outbox_generations WHERE ended_at IS NULL"
        )
        rotation = admin.transaction()
        await rotation.start()
        await admin.execute("LOCK TABLE core.outbox IN SHARE MODE")  # the rotation's barrier

        async def write() -> list[int]:
            async with writer.transaction(isolation="repeatable_read"):
                return await enqueue(writer, _items(2))

        waiting = asyncio.create_task(write())
        await asyncio.sleep(0.5)
        assert not waiting.done()  # behind the barrier, its snapshot taken
        await admin.execute(
            "UPDATE core.outbox_generations SET ended_at = now() WHERE generation = $1",
            current["generation"],
        )
        await admin.execute(
            "INSERT INTO core.outbox_generations (generation, slot, started_at) "
            "VALUES ($1, $2, now())",
            current["generation"] + 1,
            (current["slot"] + 1) % OUTBOX_SLOTS,
        )
        await rotation.commit()
        with pytest.raises(asyncpg.SerializationError):
            await asyncio.wait_for(waiting, 30)


async def test_snapshot_isolation_writers_are_neither_refused_nor_serialized_without_a_rotation(
    database_url: str,
) -> None:
    """The row lock a REPEATABLE READ or SERIALIZABLE writer takes on the current generation is
    shared: writers whose snapshots are current write side by side, none waits for another or
    is refused."""
    async with (
        session(database_url, WRITER) as one,
        session(database_url, WRITER) as two,
    ):
        first = one.transaction(isolation="repeatable_read")
        second = two.transaction(isolation="serializable")
        await first.start()
        await second.start()
        a = await asyncio.wait_for(enqueue(one, _items(3)), 10)
        b = await asyncio.wait_for(enqueue(two, _items(3, first=3)), 10)
        await first.commit()
        await second.commit()
        async with one.transaction():  # READ COMMITTED, as usual
            c = await enqueue(one, _items(1, first=6))
    slots = await _slots(database_url, a + b + c)
    assert len(set(slots)) == 1


@pytest.mark.parametrize("isolation", ["repeatable_read", "serializable", "read_uncommitted"])
async def test_a_plugins_outbox_writer_writes_at_any_isolation_level(
    database_url: str, isolation: str
) -> None:
    """spectral_outbox_writer is the role a plugin's producer, or a projection that emits
    events, writes the outbox with (migration plugins: ``spectral.outbox.enqueue``'s grants).
    Migration 0054 has a writer at any level but READ COMMITTED lock the current generation
    through core.outbox_current_slot_locked(), whose EXECUTE it grants to spectral_producer and
    spectral_executor only: the plugin's insert, with no rotation anywhere, is refused with
    permission denied (42501) — not the 40001 its level asks it to retry — on every attempt.
    READ UNCOMMITTED is READ COMMITTED in PostgreSQL, yet it names itself otherwise and takes
    the locked path too."""
    async with (
        session(database_url, "spectral_outbox_writer") as writer,
        writer.transaction(isolation=isolation),  # type: ignore[arg-type]
    ):
        ids = await enqueue(writer, _items(2))
    assert len(await _slots(database_url, ids)) == 2
