"""The redrive record ``core.dlq_redrives`` (role ``spectral_operator``)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Final

import asyncpg

from spectral.db.connect import connect, guarded
from spectral.db.queries import load_queries
from spectral.dlq.records import DeadLetterRecord
from spectral.dlq.store import storable
from spectral.settings import Settings

OPERATOR_ROLE: Final = "spectral_operator"
_SQL: Final = load_queries(Path(__file__).with_name("queries.sql"))


async def connect_operator(settings: Settings, database_url: str) -> asyncpg.Connection:
    """As the operator: SPECTRAL_OPERATOR_DATABASE_URL when set (a login that already is one),
    else ``database_url`` with the operator role assumed."""
    if settings.operator_database_url is not None:
        return await connect(settings.operator_database_url.get_secret_value())
    return await connect(database_url, role=OPERATOR_ROLE)


class RedriveRepository:
    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn

    async def redriven(
        self, dlq_topic: str, positions: Collection[tuple[int, int]]
    ) -> set[tuple[int, int]]:
        """Which of ``positions`` (partition, offset) of ``dlq_topic`` were redriven."""
        if not positions:
            return set()
        rows = await guarded(
            "read redriven dead letters",
            lambda: self.conn.fetch(
                _SQL["redriven_among"],
                dlq_topic,
                [p for p, _ in positions],
                [o for _, o in positions],
            ),
        )
        return {(r["dlq_partition"], r["dlq_offset"]) for r in rows}

    async def redriven_present(self, dlq_topic: str, firsts: Mapping[int, int]) -> int:
        """How many dead letters still on ``dlq_topic`` (``firsts``: each partition's first
        offset) were redriven."""
        count: int = await guarded(
            "count redriven dead letters",
            lambda: self.conn.fetchval(
                _SQL["redriven_present"], dlq_topic, list(firsts), list(firsts.values())
            ),
        )
        return count

    async def claim(
        self, dlq_topic: str, source_topic: str, records: Sequence[DeadLetterRecord]
    ) -> set[tuple[int, int]]:
        """Record ``records`` as redriven (in the caller's transaction); returns those that were
        not recorded before."""
        rows = await guarded(
            "claim dead letters for redrive",
            lambda: self.conn.fetch(
                _SQL["claim_redrives"],
                dlq_topic,
                source_topic,
                [r.partition for r in records],
                [r.offset for r in records],
                [storable(r.reason) for r in records],
            ),
        )
        return {(r["dlq_partition"], r["dlq_offset"]) for r in rows}

    async def release(self, dlq_topic: str, positions: Sequence[tuple[int, int]]) -> None:
        """Forget claims of this transaction whose records could not be redriven."""
        await guarded(
            "release redrive claims",
            lambda: self.conn.execute(
                _SQL["release_redrives"],
                dlq_topic,
                [p for p, _ in positions],
                [o for _, o in positions],
            ),
        )

    async def record_targets(
        self, dlq_topic: str, landed: Sequence[tuple[DeadLetterRecord, int, int]]
    ) -> None:
        """Where each redriven record landed: (dead letter, partition, offset)."""
        await guarded(
            "record redrive targets",
            lambda: self.conn.execute(
                _SQL["record_targets"],
                dlq_topic,
                [r.partition for r, _, _ in landed],
                [r.offset for r, _, _ in landed],
                [p for _, p, _ in landed],
                [o for _, _, o in landed],
            ),
        )
