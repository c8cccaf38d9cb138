"""All of FailureClusterService's database work (schema ``clusters`` and the outbox).

The repository hands out *units* (one transaction on one pooled connection) for the steps that
must see and change a cluster atomically, and runs the lease statements on their own (each is
one autocommit statement or one short transaction, as ADR-0023 prescribes). Values returned are
frozen dataclasses; driver errors are translated by ``guarded``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg
import orjson

from producers.clusters.evidence import EvidenceCandidate
from producers.clusters.model import ClusterFacts, FailureObservation
from producers.clusters.severity import Criticality
from producers.clusters.snapshot import Snapshot
from spectral.db.connect import Conn, create_pool, guarded, translate
from spectral.db.queries import load_queries
from spectral.db.storable import escape_text, storable_json
from spectral.llm.answers import usage_counts
from spectral.outbox.writer import OutboxItem, enqueue

_SQL = load_queries(Path(__file__).with_name("queries.sql"))
PRODUCER_ROLE = "spectral_producer"
MODEL_CHARS = 500
ERROR_CHARS = 2000

GroupingKey = tuple[UUID, UUID, str]


@dataclass(frozen=True, slots=True)
class IngestResult:
    received: int
    inserted: int
    clusters_minted: int
    clusters_touched: int

    @property
    def duplicates(self) -> int:
        return self.received - self.inserted


@dataclass(frozen=True, slots=True)
class Mark:
    """The outcome of evaluating one cluster: the revision seen and the hash put in the outbox
    (None when nothing was published)."""

    cluster_id: UUID
    revision: int
    published_hash: str | None


@dataclass(frozen=True, slots=True)
class RecoveredLease:
    cluster_id: UUID
    content_hash: str
    request_json: str
    attempts: int
    """The attempt the new holder makes (counted already)."""
    scheduled: bool
    """A retry that was due (else a stale lease: the last holder stopped mid-call)."""


@dataclass(frozen=True, slots=True)
class ExhaustedLease:
    """A due lease that had used every attempt: it got the permanent marker."""

    cluster_id: UUID
    content_hash: str
    scheduled: bool


@dataclass(frozen=True, slots=True)
class FailedStubAttempt:
    """A failed attempt, as its holder records it on the lease."""

    attempt: int
    give_up: bool
    retry_in: timedelta
    error: str
    response: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class ClusterRow:
    cluster_id: UUID
    workspace_id: UUID
    rule_id: UUID
    signature: str
    detected_at: datetime
    revision: int
    evaluated_revision: int
    published_hash: str | None


class ClusterUnit:
    """One transaction: lock clusters, read their facts and evidence, publish, mark."""

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def claim_dirty(self, after: UUID | None, limit: int) -> list[UUID]:
        rows = await guarded(
            "claim dirty clusters", lambda: self._conn.fetch(_SQL["claim_dirty"], after, limit)
        )
        return [r["cluster_id"] for r in rows]

    async def lock(self, cluster_id: UUID) -> bool:
        found = await guarded(
            "lock cluster", lambda: self._conn.fetchval(_SQL["lock_cluster"], cluster_id)
        )
        return found is not None

    async def facts(
        self, cluster_ids: Sequence[UUID], default: Criticality, rate_window: timedelta
    ) -> list[ClusterFacts]:
        rows = await guarded(
            "read cluster facts",
            lambda: self._conn.fetch(
                _SQL["cluster_facts"], list(cluster_ids), default.value, rate_window
            ),
        )
        return [
            ClusterFacts(
                cluster_id=r["cluster_id"],
                workspace_id=r["workspace_id"],
                rule_id=r["rule_id"],
                signature=r["signature"],
                revision=int(r["revision"]),
                published_hash=r["published_hash"],
                failure_count=int(r["failure_count"]),
                first_observed_at=r["first_observed_at"],
                last_observed_at=r["last_observed_at"],
                recent_count=int(r["recent_count"]),
                criticality=Criticality(r["criticality"]),
            )
            for r in rows
            if r["failure_count"]
        ]

    async def evidence(
        self, cluster_ids: Sequence[UUID], limit: int
    ) -> dict[UUID, list[EvidenceCandidate]]:
        rows = await guarded(
            "read evidence candidates",
            lambda: self._conn.fetch(_SQL["evidence_candidates"], list(cluster_ids), limit),
        )
        found: dict[UUID, list[EvidenceCandidate]] = defaultdict(list)
        for r in rows:
            found[r["cluster_id"]].append(
                EvidenceCandidate(
                    r["failure_id"], r["observed_at"], r["summary"], int(r["summary_count"])
                )
            )
        return found

    async def ready_stubs(
        self, keys: Sequence[tuple[UUID, str]]
    ) -> dict[tuple[UUID, str], str | None]:
        """The stub decided for each key that has one: its text, or None where the attempts
        were given up (permanent marker: publish without a stub). Keys still to be generated
        (or pending) are absent."""
        if not keys:
            return {}
        clusters, hashes = [k[0] for k in keys], [k[1] for k in keys]
        rows = await guarded(
            "read rule stubs", lambda: self._conn.fetch(_SQL["ready_stubs"], clusters, hashes)
        )
        given_up = await guarded(
            "read given-up rule stubs",
            lambda: self._conn.fetch(_SQL["given_up_stubs"], clusters, hashes),
        )
        decided: dict[tuple[UUID, str], str | None] = {
            (r["cluster_id"], r["content_hash"]): None for r in given_up
        }
        decided.update(
            {(r["cluster_id"], r["content_hash"]): r["suggested_rule_stub"] for r in rows}
        )
        return decided

    async def publish(self, snapshots: Sequence[Snapshot]) -> list[int]:
        """Outbox rows for the snapshots, in this transaction (record key = cluster_id)."""
        items = [OutboxItem(s, str(s.payload.cluster_id)) for s in snapshots]
        return await guarded("enqueue snapshots", lambda: enqueue(self._conn, items))

    async def mark_evaluated(self, marks: Sequence[Mark]) -> None:
        if not marks:
            return
        await guarded(
            "mark clusters evaluated",
            lambda: self._conn.execute(
                _SQL["mark_evaluated"],
                [m.cluster_id for m in marks],
                [m.revision for m in marks],
                [m.published_hash for m in marks],
            ),
        )


class ClusterRepository:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    @classmethod
    @asynccontextmanager
    async def open(
        cls, database_url: str, *, role: str | None = PRODUCER_ROLE, max_size: int = 4
    ) -> AsyncIterator[ClusterRepository]:
        pool = await create_pool(database_url, role=role, max_size=max_size)
        try:
            yield cls(pool)
        finally:
            await pool.close()

    @asynccontextmanager
    async def unit(self) -> AsyncIterator[ClusterUnit]:
        try:
            async with self._pool.acquire() as conn, conn.transaction():
                yield ClusterUnit(conn)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            # faults at BEGIN/COMMIT (statements inside are already translated by guarded)
            raise translate(exc, "cluster transaction") from exc

    # -- ingest -----------------------------------------------------------------------------

    async def ingest(self, observations: Sequence[FailureObservation]) -> IngestResult:
        """Record failures idempotently (by failure_id) and mint clusters for new keys."""
        unique: dict[str, FailureObservation] = {}
        for o in observations:
            unique.setdefault(o.failure_id, o)
        batch = list(unique.values())
        if not batch:
            return IngestResult(len(observations), 0, 0, 0)
        keys = [(o.workspace_id, o.rule_id, o.grouping_signature) for o in batch]

        async def run() -> IngestResult:
            async with self._pool.acquire() as conn, conn.transaction():
                minted = await conn.fetch(
                    _SQL["mint_clusters"],
                    [o.failure_id for o in batch],
                    [k[0] for k in keys],
                    [k[1] for k in keys],
                    [k[2] for k in keys],
                )
                resolved = await conn.fetch(
                    _SQL["lock_clusters_for_keys"],
                    [k[0] for k in keys],
                    [k[1] for k in keys],
                    [k[2] for k in keys],
                )
                cluster_of: dict[GroupingKey, UUID] = {
                    (r["workspace_id"], r["rule_id"], r["signature"]): r["cluster_id"]
                    for r in resolved
                }
                rows = [(o, cluster_of.get(k)) for o, k in zip(batch, keys, strict=True)]
                known = [(o, c) for o, c in rows if c is not None]
                counts = await conn.fetchrow(
                    _SQL["insert_failures"],
                    [o.failure_id for o, _ in known],
                    [c for _, c in known],
                    [o.observed_at for o, _ in known],
                    [o.summary for o, _ in known],
                    [orjson.dumps(o.attributes).decode() for o, _ in known],
                )
            assert counts is not None  # noqa: S101 - the statement always returns one row
            return IngestResult(
                len(observations), counts["inserted"], len(minted), counts["touched"]
            )

        return await guarded("ingest failures", run)

    # -- leases (ADR-0023) --------------------------------------------------------------------

    async def claim_stub_lease(
        self, cluster_id: UUID, content_hash: str, request_json: str, holder: str
    ) -> bool:
        won = await guarded(
            "claim stub lease",
            lambda: self._pool.fetchval(
                _SQL["claim_stub_lease"], cluster_id, content_hash, request_json, holder
            ),
        )
        return won is not None

    async def recover_stub_leases(
        self, stale_after: timedelta, holder: str, limit: int, max_attempts: int
    ) -> tuple[list[RecoveredLease], list[ExhaustedLease]]:
        """The recovery clause: due leases with attempts left are re-stamped for ``holder``;
        those without get the permanent marker."""
        exhausted = await guarded(
            "exhaust stub leases",
            lambda: self._pool.fetch(_SQL["exhaust_stub_leases"], stale_after, limit, max_attempts),
        )
        rows = await guarded(
            "recover stub leases",
            lambda: self._pool.fetch(
                _SQL["recover_stub_leases"], stale_after, holder, limit, max_attempts
            ),
        )
        return (
            [
                RecoveredLease(
                    r["cluster_id"],
                    r["content_hash"],
                    r["request"],
                    int(r["attempts"]),
                    bool(r["scheduled"]),
                )
                for r in rows
            ],
            [
                ExhaustedLease(r["cluster_id"], r["content_hash"], bool(r["scheduled"]))
                for r in exhausted
            ],
        )

    async def finalize_stub_lease(
        self,
        cluster_id: UUID,
        content_hash: str,
        stub: str,
        model: str,
        usage: Mapping[str, int],
        *,
        response: Mapping[str, Any] | None = None,
    ) -> bool:
        """Finalize by UPDATE and, only if that UPDATE finalized a pending row, record usage —
        in one transaction. ``response`` is the paid answer (``spectral.llm.answers``)."""
        answer = None if response is None else orjson.dumps(storable_json(response)).decode()
        model_text = escape_text(model)[:MODEL_CHARS]

        async def run() -> bool:
            async with self._pool.acquire() as conn, conn.transaction():
                done = await conn.fetchval(
                    _SQL["finalize_stub_lease"], cluster_id, content_hash, stub, model_text, answer
                )
                if done is None:
                    return False
                await conn.execute(
                    _SQL["record_usage"],
                    cluster_id,
                    content_hash,
                    model_text,
                    orjson.dumps(usage_counts(usage)).decode(),
                )
                return True

        return await guarded("finalize stub lease", run)

    async def fail_stub_attempt(
        self, cluster_id: UUID, content_hash: str, holder: str, failure: FailedStubAttempt
    ) -> str | None:
        """Record a failed attempt on its lease (see the query); the lease's new mode, or None
        when the lease is no longer this holder's attempt."""
        answer = (
            None
            if failure.response is None
            else orjson.dumps(storable_json(failure.response)).decode()
        )
        mode = await guarded(
            "record a failed stub attempt",
            lambda: self._pool.fetchval(
                _SQL["fail_stub_attempt"],
                cluster_id,
                content_hash,
                holder,
                failure.attempt,
                failure.give_up,
                failure.retry_in.total_seconds(),
                escape_text(failure.error)[:ERROR_CHARS],
                answer,
            ),
        )
        return None if mode is None else str(mode)

    async def supersede_stub_lease(self, cluster_id: UUID, content_hash: str) -> None:
        await guarded(
            "supersede stub lease",
            lambda: self._pool.execute(_SQL["supersede_stub_lease"], cluster_id, content_hash),
        )

    # -- configuration and inspection -------------------------------------------------------

    async def set_criticality(self, rule_id: UUID, criticality: Criticality) -> None:
        await guarded(
            "set criticality",
            lambda: self._pool.execute(_SQL["set_criticality"], rule_id, criticality.value),
        )

    async def list_clusters(self) -> list[ClusterRow]:
        rows = await guarded("list clusters", lambda: self._pool.fetch(_SQL["list_clusters"]))
        return [
            ClusterRow(
                r["cluster_id"],
                r["workspace_id"],
                r["rule_id"],
                r["signature"],
                r["detected_at"],
                int(r["revision"]),
                int(r["evaluated_revision"]),
                r["published_hash"],
            )
            for r in rows
        ]
