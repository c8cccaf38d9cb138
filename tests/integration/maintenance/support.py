"""Helpers of the bounded-state tests: claims as the engine makes them, passes of maintenance,
and time that passes (generation timestamps moved into the past)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from pathlib import Path

import asyncpg
from asyncpg.transaction import Transaction

import spectral.engine
from spectral.db.connect import connect
from spectral.db.queries import load_queries
from spectral.engine.keys import dedup_keys, key_text
from spectral.kafka.retention import BrokerRetention, describe_retention
from spectral.maintenance.policy import DedupRotation
from spectral.maintenance.repository import MaintenanceRepository
from spectral.maintenance.run import MaintenanceOptions, MaintenanceReport, maintain
from spectral.settings import Settings

ENGINE_SQL = load_queries(Path(spectral.engine.__file__).with_name("queries.sql"))
"""The consumer engine's own statements (claim_keys: the dedup claim)."""
PROJECTOR = "spectral_projector"
EXECUTOR = "spectral_executor"
RULE_CANDIDATES = "rule-candidates"


@asynccontextmanager
async def session(database_url: str, role: str | None = None) -> AsyncIterator[asyncpg.Connection]:
    conn = await connect(database_url, role=role)
    try:
        yield conn
    finally:
        await conn.close()


async def held_in(
    conn: asyncpg.Connection, keys: Sequence[str], consumer: str = RULE_CANDIDATES
) -> list[str]:
    """The engine's claim statement, on the caller's connection and transaction (event ids,
    partitions and offsets of its own): the keys it answers as held, as it answers them."""
    held: list[bytes] = await conn.fetchval(
        ENGINE_SQL["claim_keys"],
        consumer,
        dedup_keys(list(keys)),
        [uuid.uuid4() for _ in keys],
        [0] * len(keys),
        list(range(len(keys))),
    )
    return [key_text(k) for k in held]


async def claim_in(
    conn: asyncpg.Connection, keys: Sequence[str], consumer: str = RULE_CANDIDATES
) -> set[str]:
    """:func:`held_in`'s claim: the keys new for ``consumer`` (those not answered as held)."""
    return set(keys).difference(await held_in(conn, keys, consumer))


@asynccontextmanager
async def claim_in_flight(database_url: str, keys: Sequence[str]) -> AsyncIterator[Transaction]:
    """A consumer's transaction that claimed ``keys`` and has not committed yet (the caller
    commits or rolls back; otherwise it is rolled back when the block ends)."""
    async with session(database_url, PROJECTOR) as conn:
        transaction = conn.transaction()
        await transaction.start()
        assert await claim_in(conn, keys) == set(keys)
        yield transaction


async def first_rotation(database_url: str) -> tuple[MaintenanceRepository, DedupRotation]:
    """A maintenance session and the rotation from generation 1 to 2 (nothing to forget)."""
    repo = await MaintenanceRepository.open(database_url)
    [current] = await repo.dedup_generations()
    return repo, DedupRotation(current, None, 2, 1, timedelta(minutes=10))


async def claim(
    database_url: str,
    keys: Sequence[str],
    consumer: str = RULE_CANDIDATES,
    role: str = PROJECTOR,
) -> set[str]:
    """Claim ``keys`` in a transaction of their own, committed."""
    async with session(database_url, role) as conn, conn.transaction():
        return await claim_in(conn, keys, consumer)


async def age(database_url: str, by: timedelta) -> None:
    """Let ``by`` pass: every (finite) timestamp of both generation tables moves into the past."""
    async with session(database_url) as conn:
        await conn.execute(
            """
            UPDATE core.dedup_generations SET
                started_at = started_at - $1, ended_at = ended_at - $1,
                forgotten_at = forgotten_at - $1, copies_before = copies_before - $1;
            UPDATE core.outbox_generations SET
                started_at = started_at - $1, ended_at = ended_at - $1,
                fully_published_at = fully_published_at - $1, truncated_at = truncated_at - $1;
            """.replace("$1", f"interval '{by.total_seconds()} seconds'")
        )


async def clock_went_back(database_url: str, by: timedelta) -> None:
    """As if the database's clock stepped back by ``by`` since the outbox's rows were written:
    every row's write (created_at) and available_at move ``by`` into the future."""
    async with session(database_url) as conn:
        await conn.execute(
            "UPDATE core.outbox SET created_at = created_at + $1::interval, "
            "available_at = available_at + $1::interval",
            by,
        )


def topics_of(settings: Settings, consumers: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    return {name: [settings.topic_prefix + t for t in types] for name, types in consumers.items()}


async def run_maintenance(
    settings: Settings,
    *,
    consumers: Mapping[str, Sequence[str]] | None = None,
    **options: object,
) -> MaintenanceReport:
    """One pass as ``spectral maintenance`` makes it (consumers: name -> event types)."""
    assert settings.database_url is not None
    assert settings.kafka_bootstrap is not None
    bootstrap = settings.kafka_bootstrap
    mapping = topics_of(
        settings, consumers or {RULE_CANDIDATES: ["platform.failure_cluster.detected"]}
    )

    async def describe(topics: Sequence[str]) -> BrokerRetention:
        return await describe_retention(settings, bootstrap, topics)

    repo = await MaintenanceRepository.open(settings.database_url.get_secret_value())
    try:
        return await maintain(repo, mapping, describe, MaintenanceOptions(**options))  # type: ignore[arg-type]
    finally:
        await repo.close()


async def generations(database_url: str, table: str = "dedup") -> list[asyncpg.Record]:
    async with session(database_url) as conn:
        return list(await conn.fetch(f"SELECT * FROM core.{table}_generations ORDER BY generation"))


async def forgotten_before(database_url: str, moment: datetime) -> None:
    """A generation was forgotten: records appended before ``moment`` may carry its keys."""
    async with session(database_url) as admin:
        await admin.execute(
            """
            UPDATE core.dedup_generations SET ended_at = $1 WHERE generation = 1;
            UPDATE core.dedup_generations
               SET forgotten_at = $1, copies_before = $1, rows_forgotten = 0
             WHERE generation = 1;
            INSERT INTO core.dedup_generations (generation, slot, started_at) VALUES (2, 1, $1);
            """.replace("$1", f"'{moment.isoformat()}'::timestamptz")
        )
