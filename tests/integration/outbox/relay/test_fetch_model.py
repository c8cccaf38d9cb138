"""Which outbox rows the relay's fetch takes, and which maintenance holds back, against a model of
the rule, over generated outboxes: rows of a few keys, written without a delay, with an
available_at before their write, delayed until a time that has passed, delayed a little (within
maintenance's margin) or long (beyond it), published or not; some keys left out of the fetch and
some rows in flight.

The rule (spectral/outbox/relay/queries.sql, fetch_batch; migration 0057, core.outbox_held_back):
a row is delayed when written with an available_at later than its write; a delayed row waits
until its time, and so does every later row of its key; the fetch takes the unpublished rows that
do not wait, in id order, none of a key left out nor a row in flight. Maintenance holds back, of
a slot's unpublished rows, those from their key's first row delayed beyond the margin on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spectral.outbox.relay.repository import RELAY_ROLE, RelayRepository
from spectral.outbox.relay.shards import SHARD_COUNT
from tests.integration.maintenance.support import session

pytestmark = pytest.mark.integration

KEYS = ("a", "b", "c")
KINDS = {
    # available_at relative to created_at / now(), as SQL
    "plain": "c.created_at",
    "early": "c.created_at - interval '30 seconds'",
    "passed": "now() - interval '5 seconds'",
    "soon": "now() + interval '30 seconds'",
    "later": "now() + interval '1 hour'",
}
"""How a row's available_at is written: ``passed``, ``soon`` and ``later`` are delayed (later
than the write, which is 10 s or 1,000 s ago); ``soon`` within maintenance's margin of a
minute, ``later`` beyond it."""


@dataclass(frozen=True)
class Row:
    key: str
    kind: str
    ago: int
    published: bool


@dataclass(frozen=True)
class Ask:
    """A fetch's arguments: at most ``limit`` rows, none of the keys ``leave_out`` nor of the
    rows ``in_flight`` (by position in the rows written)."""

    limit: int
    leave_out: frozenset[str]
    in_flight: frozenset[int]


rows_strategy = st.lists(
    st.builds(
        Row,
        st.sampled_from(KEYS),
        st.sampled_from(sorted(KINDS)),
        st.sampled_from([10, 1_000]),
        st.booleans(),
    ),
    max_size=24,
)


async def _write(conn: asyncpg.Connection, rows: list[Row]) -> list[int]:
    """The rows in one statement, their ids in list order."""
    await conn.execute("TRUNCATE core.outbox")
    kind = " ".join(f"WHEN '{name}' THEN {sql}" for name, sql in KINDS.items())
    written = await conn.fetch(
        "WITH c AS (SELECT r.n, r.key, r.kind, r.published, "
        "now() - make_interval(secs => r.ago) AS created_at "
        "FROM unnest($1::text[], $2::text[], $3::int[], $4::bool[]) "
        "WITH ORDINALITY AS r (key, kind, ago, published, n)) "
        "INSERT INTO core.outbox (event_type, record_key, idempotency_key, envelope, created_at, "
        f"available_at, published_at) SELECT 't', c.key, 'i' || c.n, '\\x00'::bytea, c.created_at, "
        f"CASE c.kind {kind} END, CASE WHEN c.published THEN now() END FROM c ORDER BY c.n "
        "RETURNING id",
        [r.key for r in rows],
        [r.kind for r in rows],
        [r.ago for r in rows],
        [r.published for r in rows],
    )
    ids = [int(r["id"]) for r in written]
    assert ids == sorted(ids)
    return ids


def _first(rows: list[Row], ids: list[int], kinds: set[str]) -> dict[str, int]:
    """Each key's first unpublished row of one of ``kinds``."""
    first: dict[str, int] = {}
    for row, row_id in zip(rows, ids, strict=True):
        if not row.published and row.kind in kinds:
            first.setdefault(row.key, row_id)
    return first


def _fetched(
    rows: list[Row], ids: list[int], limit: int, leave_out: frozenset[str], in_flight: set[int]
) -> list[int]:
    waiting = _first(rows, ids, {"soon", "later"})
    return [
        row_id
        for row, row_id in zip(rows, ids, strict=True)
        if not row.published
        and row.kind in {"plain", "early", "passed"}
        and row.key not in leave_out
        and row_id not in in_flight
        and row_id < waiting.get(row.key, row_id + 1)
    ][:limit]


def _held_back(rows: list[Row], ids: list[int]) -> list[int]:
    beyond = _first(rows, ids, {"later"})
    return [
        row_id
        for row, row_id in zip(rows, ids, strict=True)
        if not row.published and row_id >= beyond.get(row.key, row_id + 1)
    ]


@pytest.fixture
async def relay(database_url: str) -> AsyncIterator[RelayRepository]:
    """A relay's session (its role and plan settings), kept for every example."""
    repo = await RelayRepository.open(database_url, role=RELAY_ROLE)
    try:
        yield repo
    finally:
        await repo.close()


@pytest.fixture
async def admin(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    async with session(database_url) as conn:
        yield conn


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    rows=rows_strategy,
    ask=st.builds(
        Ask,
        st.integers(1, 30),
        st.frozensets(st.sampled_from(KEYS), max_size=2),
        st.frozensets(st.integers(0, 23), max_size=4),
    ),
)
async def test_the_fetch_and_the_held_back_rows_follow_the_rule(
    relay: RelayRepository, admin: asyncpg.Connection, rows: list[Row], ask: Ask
) -> None:
    limit, leave_out, in_flight = ask.limit, ask.leave_out, ask.in_flight
    ids = await _write(admin, rows)
    held = await admin.fetch(
        "SELECT id FROM core.outbox_held_back(0::smallint, interval '1 minute') ORDER BY id"
    )
    flying = {ids[i] for i in in_flight if i < len(ids)}
    fetched = await relay.fetch_batch(
        list(range(SHARD_COUNT)), limit, leave_out=sorted(leave_out), in_flight=sorted(flying)
    )
    assert [r.id for r in fetched] == _fetched(rows, ids, limit, leave_out, flying)
    assert [r["id"] for r in held] == _held_back(rows, ids)
