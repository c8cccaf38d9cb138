"""FailureClusterService: failures in, cluster snapshots out through the outbox (ADR-057).

``ingest`` records failures idempotently and mints cluster ids (repository.py). ``tick``
re-evaluates the clusters that gained failures and puts a snapshot in the outbox when its hash
differs from the last one published — in the same transaction that records the new state, while
holding the cluster's row lock (so a cluster's outbox rows are in commit order). Any number of
replicas may tick at once: a tick locks the clusters it evaluates with SKIP LOCKED, so replicas
split the work instead of repeating it, and the published-hash check under the lock makes a
repeat harmless anyway.

The optional model-written ``suggested_rule_stub`` is paid work on the work ledger, run by the
work executor (stub.py; one lease, one attempt counter, one retry policy for every paid call).
For a cluster content without a stub, the tick asks for one — opening its work in the same
transaction, once per (cluster, content hash) — and holds the snapshot back while the first call
is still to come or in flight, for ``stub_wait`` at most. Then it publishes: with the stub once
the work set it; without it when the work ended without one (its attempts were given up: nobody
pays for that content again), failed an attempt (retries go on) or took longer than
``stub_wait`` — a model never holds the triage signal back for long. A stub that comes after
its cluster went out without it is published as a new snapshot by the next tick. Work asked for
a content the cluster has moved on from is canceled (no call; an answer in flight is kept).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from uuid import UUID

from prometheus_client import CollectorRegistry

from producers.clusters.evidence import EvidenceCandidate, select_evidence
from producers.clusters.metrics import ClusterMetrics, IngestOutcome, StubEvent
from producers.clusters.model import ClusterFacts, FailureObservation, InvalidLineError, parse_line
from producers.clusters.policy import ClusterPolicy
from producers.clusters.repository import (
    PRODUCER_ROLE,
    ClusterRepository,
    ClusterUnit,
    IngestResult,
    Mark,
    StubWork,
)
from producers.clusters.severity import Criticality
from producers.clusters.snapshot import Snapshot, build_snapshot
from producers.clusters.stub import identity, work_request
from spectral.errors import ConfigurationError, TransientError
from spectral.observability.logging import get_logger
from spectral.retry import Backoff

log = get_logger(__name__)

INGEST_BATCH = 1000
MAX_REPORTED_INVALID = 20


@dataclass
class IngestSummary:
    received: int = 0
    inserted: int = 0
    invalid: int = 0
    clusters_minted: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def duplicates(self) -> int:
        return self.received - self.invalid - self.inserted


@dataclass
class TickReport:
    evaluated: int = 0
    published: int = 0
    stubs_asked: int = 0
    """Rule stubs asked for (their work opened on the ledger)."""
    stubs_held: int = 0
    """Snapshots held back while their stub's first call is to come or in flight."""
    stubs_superseded: int = 0
    """Stub work canceled: its cluster moved on to other content."""
    stubs_arrived: int = 0
    """Clusters evaluated again because the stub work they went out without has ended."""


@dataclass(frozen=True, slots=True)
class _Evaluated:
    facts: ClusterFacts
    evidence: tuple[EvidenceCandidate, ...]
    content: Snapshot  # the snapshot without a stub

    @property
    def content_hash(self) -> str:
        return self.content.payload.snapshot_hash


class FailureClusterService:
    def __init__(
        self,
        repository: ClusterRepository,
        *,
        policy: ClusterPolicy | None = None,
        metrics: ClusterMetrics | None = None,
    ) -> None:
        self._repo = repository
        self.policy = policy or ClusterPolicy()
        self.metrics = metrics or ClusterMetrics(CollectorRegistry())

    @classmethod
    @asynccontextmanager
    async def connect(
        cls,
        database_url: str,
        *,
        policy: ClusterPolicy | None = None,
        metrics: ClusterMetrics | None = None,
        role: str | None = PRODUCER_ROLE,
    ) -> AsyncIterator[FailureClusterService]:
        """The Python API for services embedding the producer::

        async with FailureClusterService.connect(url) as svc:
            await svc.ingest(observations)
            await svc.tick()
        """
        async with ClusterRepository.open(database_url, role=role) as repo:
            yield cls(repo, policy=policy, metrics=metrics)

    @property
    def repository(self) -> ClusterRepository:
        return self._repo

    # -- ingest -------------------------------------------------------------------------------

    async def ingest(self, observations: Sequence[FailureObservation]) -> IngestResult:
        """Record failures; a failure_id already recorded changes nothing."""
        result = await self._repo.ingest(observations)
        self.metrics.clusters_detected.inc(result.clusters_minted)
        self.metrics.ingested[IngestOutcome.NEW].inc(result.inserted)
        self.metrics.ingested[IngestOutcome.DUPLICATE].inc(result.duplicates)
        return result

    async def ingest_lines(
        self, lines: Iterable[str | bytes], batch: int = INGEST_BATCH
    ) -> IngestSummary:
        """Ingest JSON lines (blank lines skipped); invalid lines are counted and reported."""
        summary = IngestSummary()
        pending: list[FailureObservation] = []

        async def flush() -> None:
            if pending:
                result = await self.ingest(pending)
                summary.inserted += result.inserted
                summary.clusters_minted += result.clusters_minted
                pending.clear()

        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            summary.received += 1
            try:
                pending.append(parse_line(line))
            except InvalidLineError as exc:
                summary.invalid += 1
                if len(summary.errors) < MAX_REPORTED_INVALID:
                    summary.errors.append(f"line {number}: {exc}")
                continue
            if len(pending) >= batch:
                await flush()
        await flush()
        return summary

    async def set_criticality(self, rule_id: UUID, criticality: Criticality) -> None:
        await self._repo.set_criticality(rule_id, criticality)

    # -- tick ---------------------------------------------------------------------------------

    async def tick(self) -> TickReport:
        """Re-evaluate the clusters that changed; publish the snapshots whose hash changed."""
        report = TickReport()
        if self.policy.generate_stubs:
            report.stubs_arrived = await self._repo.stub_arrivals()
        cursor: UUID | None = None
        while True:
            cursor = await self._evaluate_batch(cursor, report)
            if cursor is None:
                return report

    async def run(self, every: float, stop: asyncio.Event) -> None:
        """Tick every ``every`` seconds until ``stop`` is set. Infrastructure faults back off;
        so does any other failure (logged and counted: one bad tick never stops the service);
        only a configuration error ends it."""
        backoff = Backoff(base=0.5, cap=max(every, 10.0))
        faults = 0
        while not stop.is_set():
            wait = every
            try:
                report = await self.tick()
            except ConfigurationError:
                raise
            except Exception as exc:  # noqa: BLE001 - logged; the next tick tries again
                faults += 1
                wait = backoff.delay(faults)
                log.warning(
                    "tick failed; backing off",
                    error=f"{type(exc).__name__}: {exc}"[:500],
                    transient=isinstance(exc, TransientError),
                    retry_in=wait,
                )
            else:
                faults = 0
                if report.evaluated or report.stubs_arrived:
                    log.info("tick", **vars(report))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=wait)

    async def _evaluate(self, unit: ClusterUnit, cluster_ids: Sequence[UUID]) -> list[_Evaluated]:
        policy = self.policy
        facts = await unit.facts(
            cluster_ids, policy.default_criticality, policy.severity.rate_window
        )
        candidates = await unit.evidence([f.cluster_id for f in facts], policy.evidence_limit)
        evaluated: list[_Evaluated] = []
        for f in facts:
            evidence = select_evidence(candidates.get(f.cluster_id, ()), policy.evidence_limit)
            evaluated.append(_Evaluated(f, evidence, build_snapshot(f, evidence, policy.severity)))
        return evaluated

    def _decide(self, facts: ClusterFacts, snapshot: Snapshot, out: list[Snapshot]) -> Mark:
        """Publish iff the hash differs from the last published one."""
        new_hash = snapshot.payload.snapshot_hash
        if new_hash == facts.published_hash:
            return Mark(facts.cluster_id, facts.revision, None)
        out.append(snapshot)
        return Mark(facts.cluster_id, facts.revision, new_hash)

    async def _evaluate_batch(self, cursor: UUID | None, report: TickReport) -> UUID | None:
        """One batch of dirty clusters, one transaction; the next cursor (None: done)."""
        policy = self.policy
        publish: list[Snapshot] = []
        async with self._repo.unit() as unit:
            ids = await unit.claim_dirty(cursor, policy.batch_size)
            if not ids:
                return None
            evaluated = await self._evaluate(unit, ids)
            eligible = [e for e in evaluated if e.facts.failure_count >= policy.min_failures]
            work: dict[tuple[UUID, str], StubWork] = {}
            awaited: dict[UUID, UUID] = {}
            if policy.generate_stubs:
                work = await self._stub_work(unit, eligible, report)
            marks = self._marks(evaluated, work, publish, awaited, report)
            await unit.await_stubs(awaited)
            await unit.publish(publish)
            await unit.mark_evaluated(marks)
        report.evaluated += len(ids)
        report.published += len(publish)
        self.metrics.snapshots_published.inc(len(publish))
        return ids[-1]

    async def _stub_work(
        self, unit: ClusterUnit, eligible: Sequence[_Evaluated], report: TickReport
    ) -> dict[tuple[UUID, str], StubWork]:
        """The stub work of each cluster's current content — asked for now where it never was
        — after canceling the work of contents the clusters moved on from."""
        keys = [(e.facts.cluster_id, e.content_hash) for e in eligible]
        report.stubs_superseded += await unit.supersede_stubs(keys)
        work = await unit.stub_work(keys, self.policy.stub_wait.total_seconds())
        missing = [e for e in eligible if (e.facts.cluster_id, e.content_hash) not in work]
        opened = await unit.ask_stubs([work_request(e.facts, e.content) for e in missing])
        report.stubs_asked += len(opened)
        self.metrics.stubs[StubEvent.ASKED].inc(len(opened))
        hold = self.policy.stub_wait.total_seconds() > 0
        for e in missing:
            thread = opened.get(identity(e.facts.cluster_id, e.content_hash))
            work[(e.facts.cluster_id, e.content_hash)] = StubWork(
                None, thread, closed=False, hold=hold
            )
        return work

    def _marks(
        self,
        evaluated: Sequence[_Evaluated],
        work: Mapping[tuple[UUID, str], StubWork],
        publish: list[Snapshot],
        awaited: dict[UUID, UUID],
        report: TickReport,
    ) -> list[Mark]:
        """What to publish and mark of a batch (see the module docstring); ``awaited`` gets the
        clusters going out without the stub still worked on."""
        policy = self.policy
        marks: list[Mark] = []
        for e in evaluated:
            f = e.facts
            if f.failure_count < policy.min_failures:
                marks.append(Mark(f.cluster_id, f.revision, None))
                continue
            final = e.content
            state = work.get((f.cluster_id, e.content_hash))
            if state is not None:
                if state.stub is not None:
                    final = build_snapshot(f, e.evidence, policy.severity, state.stub)
                elif state.hold:
                    report.stubs_held += 1
                    continue  # still dirty: evaluated again by the next tick
                elif not state.closed and state.thread_id is not None:
                    awaited[f.cluster_id] = state.thread_id
                event = StubEvent.PUBLISHED_WITH if state.stub else StubEvent.PUBLISHED_WITHOUT
                self.metrics.stubs[event].inc()
            marks.append(self._decide(f, final, publish))
        return marks
