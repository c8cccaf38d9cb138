"""Claims of several members at once, alone and across a rotation of the dedup ring, against the
real server: whatever the batches, their order and their timing, each key is applied once and
recorded once, in one slot (queries.sql ``claim_keys``; docs/explanation/bounded-state.md).

Each member is the engine's own :class:`BatchTransaction` on a connection of its own (so a claim
that lost a race is retried as the engine retries it), with a handler that records the keys it
was given and may hold its transaction open a moment (the claim's rows and locks with it), so
another member's claim of the same keys waits for it. Keys are fresh in every example; the
database is shared by the examples of a test (generations accumulate, as on a live ring)."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Sequence
from datetime import timedelta

import asyncpg
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from spectral.db.connect import create_pool
from spectral.engine.handler import Delivery, Handler, HandlerResult
from spectral.engine.metrics import ConsumerMetrics
from spectral.engine.retrying import Retrying
from spectral.engine.transaction import BatchTransaction, PoolConnections
from spectral.maintenance.policy import DedupRotation
from spectral.maintenance.repository import MaintenanceRepository
from spectral.retry import Backoff
from tests.integration.maintenance.support import PROJECTOR, RULE_CANDIDATES, claim, session

pytestmark = pytest.mark.integration

POOL = 8
"""Keys an example draws its batches from."""

_BATCH = st.lists(st.integers(0, POOL - 1), min_size=1, max_size=POOL)
"""One batch: indices into the example's keys, in delivery order (repeats are duplicates
within the batch)."""
_MEMBER = st.lists(_BATCH, min_size=1, max_size=3)
"""One member's batches, applied one after the other."""
_HOLD = st.sampled_from([0.0, 0.02, 0.1])
"""How long a member's handler keeps its transaction open after its claim."""


class Recording(Handler[None]):
    """Records the keys it applies; holds its transaction open for ``hold`` seconds."""

    name = RULE_CANDIDATES
    event_types = ("platform.failure_cluster.detected",)
    database_role = PROJECTOR

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.hold = 0.0

    async def apply(
        self,
        conn: asyncpg.Connection,  # noqa: ARG002 - the claim is what is tested, not the effect
        deliveries: Sequence[Delivery],
    ) -> HandlerResult[None]:
        if self.hold:
            await asyncio.sleep(self.hold)
        self.keys.extend(d.idempotency_key for d in deliveries)
        return HandlerResult()


class Member:
    """One consumer-group member: its own connection, handler and transaction."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.handler = Recording()
        metrics = ConsumerMetrics(CollectorRegistry(), self.handler.name)
        self.transaction = BatchTransaction(
            self.handler,
            PoolConnections(pool),
            Retrying(Backoff(base=0.01, cap=0.05), metrics, asyncio.Event()),
        )

    async def apply(self, keys: list[str], batches: list[list[int]], hold: float) -> None:
        self.handler.hold = hold
        for offset, batch in enumerate(batches):
            outcome = await self.transaction.apply(
                [Delivery(None, keys[i], uuid.uuid4(), "t", 0, offset, None, b"{}") for i in batch]
            )
            assert outcome.failed == ()


def _keys() -> list[str]:
    return [f"{uuid.uuid4()}:{uuid.uuid4().hex}" for _ in range(POOL)]


async def _rows_of(database_url: str, keys: Sequence[str]) -> Counter[str]:
    """How many rows of the ring hold each of ``keys`` (either slot)."""
    async with session(database_url) as admin:
        rows = await admin.fetch(
            "SELECT idempotency_key FROM core.event_handled_keys "
            "WHERE consumer = $1 AND idempotency_key = ANY($2::text[])",
            RULE_CANDIDATES,
            list(keys),
        )
    return Counter(r["idempotency_key"] for r in rows)


async def _rotate(repo: MaintenanceRepository) -> None:
    """One rotation as maintenance plans it (the cutoff aside): forget the previous generation
    when there is one, end the current one, start the next in the freed slot."""
    generations = await repo.dedup_generations()
    [current] = [g for g in generations if g.ended_at is None]
    previous = [g for g in generations if g.live and g.ended_at is not None]
    forget = max(previous, key=lambda g: g.generation) if previous else None
    slot = forget.slot if forget is not None else 1 - current.slot
    rotation = DedupRotation(current, forget, current.generation + 1, slot, timedelta(minutes=10))
    await repo.rotate_dedup(rotation, timedelta(seconds=30))


def _exactly_once(members: Sequence[Member], claimed: set[str], held: set[str]) -> None:
    applied = Counter(k for m in members for k in m.handler.keys)
    assert all(n == 1 for n in applied.values()), applied
    assert set(applied) == claimed - held


def test_members_claiming_the_same_keys_at_once_apply_each_once(database_url: str) -> None:
    """Two members, overlapping batches in any order, at once: every key applied by exactly one
    of them and recorded by one row."""
    loop = asyncio.new_event_loop()
    pools = [
        loop.run_until_complete(create_pool(database_url, role=PROJECTOR, min_size=1, max_size=1))
        for _ in range(2)
    ]

    @settings(max_examples=25, deadline=None, database=None)
    @given(_MEMBER, _MEMBER, _HOLD, _HOLD)
    @example([[0, 1, 2, 3]], [[3, 2, 1, 0]], 0.1, 0.1)  # the same keys, opposite orders
    @example([[0, 1], [2, 3]], [[2, 3], [0, 1]], 0.02, 0.1)
    def members(
        first: list[list[int]], second: list[list[int]], hold_a: float, hold_b: float
    ) -> None:
        keys = _keys()
        group = [Member(pools[0]), Member(pools[1])]

        async def run() -> None:
            await asyncio.wait_for(
                asyncio.gather(
                    group[0].apply(keys, first, hold_a), group[1].apply(keys, second, hold_b)
                ),
                60,
            )

        loop.run_until_complete(run())
        claimed = {keys[i] for batches in (first, second) for batch in batches for i in batch}
        _exactly_once(group, claimed, set())
        assert loop.run_until_complete(_rows_of(database_url, keys)) == dict.fromkeys(claimed, 1)

    try:
        members()
    finally:
        for pool in pools:
            loop.run_until_complete(pool.close())
        loop.close()


def test_claims_across_a_rotation_never_apply_a_key_twice(database_url: str) -> None:
    """Keys held by the current generation (claimed and committed first), then two members
    claiming held and fresh keys while maintenance rotates the ring (which forgets the
    generation before, holding only earlier examples' keys): no held key is applied, each fresh
    one exactly once, and every key has one row, in one slot."""
    loop = asyncio.new_event_loop()
    pools = [
        loop.run_until_complete(create_pool(database_url, role=PROJECTOR, min_size=1, max_size=1))
        for _ in range(2)
    ]
    repo = loop.run_until_complete(MaintenanceRepository.open(database_url))

    @settings(max_examples=20, deadline=None, database=None)
    @given(
        st.sets(st.integers(0, POOL - 1), max_size=POOL // 2),
        _MEMBER,
        _MEMBER,
        _HOLD,
        st.sampled_from([0.0, 0.01, 0.05]),
    )
    @example({0, 1}, [[0, 1, 2, 3]], [[3, 2, 1, 0]], 0.1, 0.01)  # the rotation waits for both
    @example(set(), [[0, 1], [2, 3]], [[2, 3], [0, 1]], 0.02, 0.0)  # nothing held
    def rotating(
        held_at: set[int],
        first: list[list[int]],
        second: list[list[int]],
        hold: float,
        rotate_after: float,
    ) -> None:
        keys = _keys()
        held = {keys[i] for i in held_at}
        group = [Member(pools[0]), Member(pools[1])]

        async def run() -> None:
            if held:
                assert await claim(database_url, sorted(held)) == held

            async def rotation() -> None:
                await asyncio.sleep(rotate_after)
                await _rotate(repo)

            await asyncio.wait_for(
                asyncio.gather(
                    group[0].apply(keys, first, hold),
                    group[1].apply(keys, second, hold),
                    rotation(),
                ),
                60,
            )

        loop.run_until_complete(run())
        claimed = {keys[i] for batches in (first, second) for batch in batches for i in batch}
        _exactly_once(group, claimed, held)
        rows = loop.run_until_complete(_rows_of(database_url, keys))
        assert rows == dict.fromkeys(claimed | held, 1)

    try:
        rotating()
    finally:
        loop.run_until_complete(repo.close())
        for pool in pools:
            loop.run_until_complete(pool.close())
        loop.close()


def test_a_key_of_another_consumer_in_the_previous_slot_is_new_to_this_one(
    database_url: str,
) -> None:
    """The previous generation holds a key for one consumer only: after a rotation the key is
    still held for that consumer and new for another (a consumer the previous slot does not
    list), and each claims it once."""

    async def run() -> None:
        key = f"{uuid.uuid4()}:{uuid.uuid4().hex}"
        assert await claim(database_url, [key]) == {key}
        repo = await MaintenanceRepository.open(database_url)
        try:
            await _rotate(repo)
        finally:
            await repo.close()
        executor = ("work-executor", "spectral_executor")
        assert await claim(database_url, [key], *executor) == {key}
        assert await claim(database_url, [key], *executor) == set()
        assert await claim(database_url, [key]) == set()
        async with session(database_url) as admin:
            slots = await admin.fetch(
                "SELECT consumer, slot FROM core.event_handled_keys WHERE idempotency_key = $1 "
                "ORDER BY consumer",
                key,
            )
        assert [(r["consumer"], r["slot"]) for r in slots] == [
            (RULE_CANDIDATES, 0),
            ("work-executor", 1),
        ]

    asyncio.run(run())
