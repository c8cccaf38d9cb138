"""All of FailureClusterService's database work (schema ``clusters`` and the outbox).

The repository hands out *units* (one transaction on one pooled connection) for the steps that
must see and change a cluster atomically — among them asking for a cluster's rule stub, which
opens work on the work ledger (stub.py) in the same transaction. Values returned are frozen
dataclasses; driver errors are translated by ``guarded``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import UUID

import asyncpg
import orjson

from producers.clusters import stub
from producers.clusters.evidence import EvidenceCandidate
from producers.clusters.model import ClusterFacts, FailureObservation
from producers.clusters.severity import Criticality
from producers.clusters.snapshot import Snapshot
from producers.work.domain.cancellation import supersede
from producers.work.domain.enqueue import WorkRequest, open_work
from spectral.db.connect import Conn, create_pool, guarded, translate
from spectral.db.queries import load_queries
from spectral.outbox.writer import OutboxItem, enqueue

_SQL = load_queries(Path(__file__).with_name("queries.sql"))
PRODUCER_ROLE = "spectral_producer"

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
class StubWork:
    """The stub work of one cluster content."""

    stub: str | None
    """The stub, once the work set it."""
    thread_id: UUID | None
    closed: bool
    """The work ended (without a stub, unless ``stub`` is set: its attempts were given up, or it
    was superseded)."""
    hold: bool
    """Its first call is still to come or in flight, within the time a snapshot waits for it."""


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

    async def stub_work(
        self, keys: Sequence[tuple[UUID, str]], hold_seconds: float
    ) -> dict[tuple[UUID, str], StubWork]:
        """The stub work of each (cluster, content hash): its stub once set, else the state of
        the work asked for it (absent: never asked)."""
        if not keys:
            return {}
        rows = await guarded(
            "read stub work",
            lambda: self._conn.fetch(
                _SQL["stub_work"],
                [k[0] for k in keys],
                [k[1] for k in keys],
                [stub.identity(*k) for k in keys],
                [stub.document_id(*k) for k in keys],
                hold_seconds,
            ),
        )
        return {
            (r["cluster_id"], r["content_hash"]): StubWork(
                r["rule_stub"], r["thread_id"], bool(r["closed"]), bool(r["hold"])
            )
            for r in rows
            if r["thread_id"] is not None or r["rule_stub"] is not None
        }

    async def ask_stubs(self, requests: Sequence[WorkRequest]) -> dict[str, UUID]:
        """Open the stub work of these contents (each identity once), in this transaction;
        the thread of each identity opened."""
        if not requests:
            return {}
        return await guarded(
            "open stub work", lambda: open_work(self._conn, requests, datetime.now(UTC))
        )

    async def supersede_stubs(self, current: Sequence[tuple[UUID, str]]) -> int:
        """Cancel the live stub work of these clusters for contents other than their current
        one (no call for a content nobody will read; a call in flight is recorded)."""
        if not current:
            return 0
        rows = await guarded(
            "find superseded stub work",
            lambda: self._conn.fetch(
                _SQL["superseded_stub_work"],
                [str(k[0]) for k in current],
                [stub.identity(*k) for k in current],
            ),
        )
        threads = [r["thread_id"] for r in rows]
        if threads:
            outbox = await guarded(
                "cancel superseded stub work",
                lambda: supersede(
                    self._conn, threads, "superseded: the cluster moved on to other content"
                ),
            )
            await guarded("enqueue cancellations", lambda: enqueue(self._conn, outbox))
        return len(threads)

    async def await_stubs(self, awaited: Mapping[UUID, UUID]) -> None:
        """These clusters' snapshots went out without the stub still being worked on (thread)."""
        if not awaited:
            return
        clusters = sorted(awaited)
        await guarded(
            "remember awaited stubs",
            lambda: self._conn.execute(
                _SQL["await_stubs"], clusters, [awaited[c] for c in clusters]
            ),
        )

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

    # -- stub work (producers/clusters/stub.py) -------------------------------------------------

    async def stub_arrivals(self) -> int:
        """Clusters whose last snapshot went out without a stub still being worked on, that
        work now ended: evaluated again (dirty) by the next batch — with the stub if it came."""
        rows = await guarded("stub arrivals", lambda: self._pool.fetch(_SQL["stub_arrivals"]))
        return len(rows)

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
