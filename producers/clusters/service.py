"""FailureClusterService: failures in, cluster snapshots out through the outbox (ADR-057).

``ingest`` records failures idempotently and mints cluster ids (repository.py). ``tick``
re-evaluates the clusters that gained failures and puts a snapshot in the outbox when its hash
differs from the last one published — in the same transaction that records the new state, while
holding the cluster's row lock (so a cluster's outbox rows are in commit order). Any number of
replicas may tick at once: a tick locks the clusters it evaluates with SKIP LOCKED, so replicas
split the work instead of repeating it, and the published-hash check under the lock makes a
repeat harmless anyway.

The optional model-written ``suggested_rule_stub`` follows ADR-0023 lease-then-LLM:

1. the snapshot is built without a stub; its hash is the *content hash*, the lease key;
2. a finalized stub for (cluster_id, content hash) is read from the read path (no pending
   rows); if there is one, the snapshot with the stub is published at once;
3. otherwise the replica INSERTs a pending lease row ON CONFLICT DO NOTHING; a loser skips the
   cluster (no call — the winner publishes it); the winner calls the synthesizer outside any
   transaction, finalizes the lease by UPDATE (usage recorded in the same transaction, only if
   the UPDATE finalized a pending row), then publishes the snapshot with the stub;
4. at the start of every tick the recovery clause re-stamps pending leases older than the
   timeout; the re-stamping replica asks the same question again (or finalizes the lease as
   superseded, without a call, if the cluster has moved on since).

A failed model call does not hold the triage signal back: the snapshot is published without a
stub and the pending lease is left for the recovery clause, whose stub then goes out as a new
snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from uuid import UUID, uuid4

from prometheus_client import CollectorRegistry

from producers.clusters.evidence import EvidenceCandidate, select_evidence
from producers.clusters.metrics import ClusterMetrics, IngestOutcome, LeaseOutcome, ModelOutcome
from producers.clusters.model import ClusterFacts, FailureObservation, InvalidLineError, parse_line
from producers.clusters.policy import ClusterPolicy
from producers.clusters.repository import (
    PRODUCER_ROLE,
    ClusterRepository,
    ClusterUnit,
    IngestResult,
    Mark,
)
from producers.clusters.severity import Criticality
from producers.clusters.snapshot import (
    Snapshot,
    build_snapshot,
    parse_rule_stub,
    request_from_json,
    request_to_json,
    stub_request,
)
from spectral.errors import SpectralError, TransientError
from spectral.llm.seam import SynthesisRequest, Synthesizer
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
    leases_won: int = 0
    leases_lost: int = 0
    leases_recovered: int = 0
    leases_superseded: int = 0
    model_calls: int = 0
    model_failures: int = 0


@dataclass(frozen=True, slots=True)
class _Evaluated:
    facts: ClusterFacts
    evidence: tuple[EvidenceCandidate, ...]
    content: Snapshot  # the snapshot without a stub

    @property
    def content_hash(self) -> str:
        return self.content.payload.snapshot_hash


@dataclass(frozen=True, slots=True)
class _StubWork:
    cluster_id: UUID
    content_hash: str
    request: SynthesisRequest


def default_holder() -> str:
    """A replica's name in lease rows: host, pid and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid4().hex[:6]}"


class FailureClusterService:
    def __init__(
        self,
        repository: ClusterRepository,
        *,
        synthesizer: Synthesizer | None = None,
        policy: ClusterPolicy | None = None,
        metrics: ClusterMetrics | None = None,
        holder: str | None = None,
        stub_concurrency: int = 4,
    ) -> None:
        self._repo = repository
        self._synth = synthesizer
        self.policy = policy or ClusterPolicy()
        self.metrics = metrics or ClusterMetrics(CollectorRegistry())
        self.holder = holder or default_holder()
        self._stub_slots = asyncio.Semaphore(stub_concurrency)

    @classmethod
    @asynccontextmanager
    async def connect(
        cls,
        database_url: str,
        *,
        synthesizer: Synthesizer | None = None,
        policy: ClusterPolicy | None = None,
        metrics: ClusterMetrics | None = None,
        holder: str | None = None,
        role: str | None = PRODUCER_ROLE,
    ) -> AsyncIterator[FailureClusterService]:
        """The Python API for services embedding the producer::

        async with FailureClusterService.connect(url, synthesizer=StubSynthesizer()) as svc:
            await svc.ingest(observations)
            await svc.tick()
        """
        async with ClusterRepository.open(database_url, role=role) as repo:
            yield cls(repo, synthesizer=synthesizer, policy=policy, metrics=metrics, holder=holder)

    @property
    def repository(self) -> ClusterRepository:
        return self._repo

    @property
    def _stubs_enabled(self) -> bool:
        return self.policy.generate_stubs and self._synth is not None

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
        if self._stubs_enabled:
            await self._recover(report)
        cursor: UUID | None = None
        while True:
            work, cursor = await self._evaluate_batch(cursor, report)
            if work:
                await self._run_stub_work(work, report)
            if cursor is None:
                return report

    async def run(self, every: float, stop: asyncio.Event) -> None:
        """Tick every ``every`` seconds until ``stop`` is set; infrastructure faults back off."""
        backoff = Backoff(base=0.5, cap=max(every, 10.0))
        faults = 0
        while not stop.is_set():
            wait = every
            try:
                report = await self.tick()
            except TransientError as exc:
                faults += 1
                wait = backoff.delay(faults)
                log.warning("tick failed; backing off", error=str(exc), retry_in=wait)
            else:
                faults = 0
                if report.evaluated or report.leases_recovered:
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

    async def _evaluate_batch(
        self, cursor: UUID | None, report: TickReport
    ) -> tuple[list[_StubWork], UUID | None]:
        work: list[_StubWork] = []
        publish: list[Snapshot] = []
        async with self._repo.unit() as unit:
            ids = await unit.claim_dirty(cursor, self.policy.batch_size)
            if not ids:
                return [], None
            evaluated = await self._evaluate(unit, ids)
            stubs = (
                await unit.ready_stubs([(e.facts.cluster_id, e.content_hash) for e in evaluated])
                if self._stubs_enabled
                else {}
            )
            marks: list[Mark] = []
            for e in evaluated:
                f = e.facts
                if f.failure_count < self.policy.min_failures:
                    marks.append(Mark(f.cluster_id, f.revision, None))
                    continue
                final = e.content
                if self._stubs_enabled:
                    stub = stubs.get((f.cluster_id, e.content_hash))
                    if stub is None:
                        # Leave the cluster dirty: the lease winner publishes it.
                        work.append(
                            _StubWork(f.cluster_id, e.content_hash, stub_request(f, e.content))
                        )
                        continue
                    final = build_snapshot(f, e.evidence, self.policy.severity, stub)
                marks.append(self._decide(f, final, publish))
            await unit.publish(publish)
            await unit.mark_evaluated(marks)
        report.evaluated += len(ids)
        report.published += len(publish)
        self.metrics.snapshots_published.inc(len(publish))
        return work, ids[-1]

    # -- ADR-0023 lease-then-LLM --------------------------------------------------------------

    async def _run_stub_work(self, work: Sequence[_StubWork], report: TickReport) -> None:
        errors: list[SpectralError] = []

        async def one(item: _StubWork) -> None:
            async with self._stub_slots:
                try:
                    await self._claim_and_generate(item, report)
                except SpectralError as exc:  # the lease stays pending: recovery retries it
                    log.warning(
                        "rule stub work failed", cluster_id=str(item.cluster_id), error=str(exc)
                    )
                    errors.append(exc)

        async with asyncio.TaskGroup() as group:
            for item in work:
                group.create_task(one(item))
        if errors:
            raise errors[0]

    async def _claim_and_generate(self, item: _StubWork, report: TickReport) -> None:
        won = await self._repo.claim_stub_lease(
            item.cluster_id, item.content_hash, request_to_json(item.request), self.holder
        )
        if not won:
            report.leases_lost += 1
            self.metrics.leases[LeaseOutcome.LOST].inc()
            return
        report.leases_won += 1
        self.metrics.leases[LeaseOutcome.WON].inc()
        await self._generate(item.cluster_id, item.content_hash, item.request, report)

    async def _generate(
        self, cluster_id: UUID, content_hash: str, request: SynthesisRequest, report: TickReport
    ) -> None:
        """We hold the lease: call the model, finalize, publish."""
        if self._synth is None:  # pragma: no cover - guarded by _stubs_enabled
            return
        report.model_calls += 1
        try:
            response = await self._synth.synthesize(request)
            stub = parse_rule_stub(response)
        except SpectralError as exc:
            report.model_failures += 1
            self.metrics.model_calls[ModelOutcome.FAILED].inc()
            log.warning(
                "rule stub model call failed; publishing without a stub, lease left for recovery",
                cluster_id=str(cluster_id),
                error=str(exc),
            )
        else:
            self.metrics.model_calls[ModelOutcome.OK].inc()
            await self._repo.finalize_stub_lease(
                cluster_id, content_hash, stub, response.model, response.usage
            )
        await self._publish_one(cluster_id, content_hash, report)

    async def _publish_one(self, cluster_id: UUID, content_hash: str, report: TickReport) -> None:
        """Publish one cluster for the content its lease was about, with the finalized stub
        (read back through the read path) — unless the cluster has moved on meanwhile."""
        publish: list[Snapshot] = []
        async with self._repo.unit() as unit:
            if not await unit.lock(cluster_id):
                return
            evaluated = await self._evaluate(unit, [cluster_id])
            if not evaluated or evaluated[0].content_hash != content_hash:
                return  # new failures arrived: the cluster is dirty, the next tick handles it
            e = evaluated[0]
            stubs = await unit.ready_stubs([(cluster_id, content_hash)])
            stub = stubs.get((cluster_id, content_hash))
            final = (
                e.content
                if stub is None
                else build_snapshot(e.facts, e.evidence, self.policy.severity, stub)
            )
            mark = self._decide(e.facts, final, publish)
            await unit.publish(publish)
            await unit.mark_evaluated([mark])
        report.published += len(publish)
        self.metrics.snapshots_published.inc(len(publish))

    async def _recover(self, report: TickReport) -> None:
        leases = await self._repo.recover_stub_leases(
            self.policy.stub_lease_timeout, self.holder, self.policy.batch_size
        )
        for lease in leases:
            report.leases_recovered += 1
            self.metrics.leases[LeaseOutcome.RECOVERED].inc()
            log.info(
                "recovered a stale rule stub lease",
                cluster_id=str(lease.cluster_id),
                attempts=lease.attempts,
            )
            async with self._repo.unit() as unit:
                evaluated = await self._evaluate(unit, [lease.cluster_id])
            if not evaluated or evaluated[0].content_hash != lease.content_hash:
                await self._repo.supersede_stub_lease(lease.cluster_id, lease.content_hash)
                report.leases_superseded += 1
                self.metrics.leases[LeaseOutcome.SUPERSEDED].inc()
                continue
            await self._generate(
                lease.cluster_id, lease.content_hash, request_from_json(lease.request_json), report
            )
