"""FailureClusterService: failures in, cluster snapshots out through the outbox (ADR-057).

``ingest`` records failures idempotently and mints cluster ids; ``tick`` publishes a changed
cluster's snapshot to the outbox in the transaction that records its state, replicas splitting
the clusters with SKIP LOCKED. The optional ``suggested_rule_stub`` is paid for under a lease
(ADR-0023) and hardened per ADR-0008; a failed call never holds a snapshot back, and one
cluster's answer never fails a tick. Explained in docs/explanation/clusters-and-outbox.md ("How
a tick works", "The stub worker's hardening").
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

from prometheus_client import CollectorRegistry

from producers.clusters.evidence import EvidenceCandidate, select_evidence
from producers.clusters.metrics import (
    ClusterMetrics,
    IngestOutcome,
    LeaseOutcome,
    ModelOutcome,
    StubFailure,
    StubOutcome,
)
from producers.clusters.model import ClusterFacts, FailureObservation, InvalidLineError, parse_line
from producers.clusters.policy import ClusterPolicy
from producers.clusters.repository import (
    PRODUCER_ROLE,
    ClusterRepository,
    ClusterUnit,
    FailedStubAttempt,
    IngestResult,
    Mark,
    RecoveredLease,
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
from spectral.db.storable import escape_text
from spectral.errors import ConfigurationError, PermanentError, TransientError
from spectral.llm.answers import response_payload, unreadable_response_payload, usage_counts
from spectral.llm.router import RouteError
from spectral.llm.seam import (
    SynthesisRequest,
    SynthesisResponse,
    Synthesizer,
    UnreadableAnswerError,
)
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
    leases_given_up: int = 0
    model_calls: int = 0
    model_failures: int = 0


@dataclass(frozen=True, slots=True)
class _Failed:
    """Why an attempt failed, and the paid answer if there was one."""

    reason: StubFailure
    message: str
    response: dict[str, Any] | None = None
    permanent: bool = field(default=True, kw_only=True)


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
                if report.evaluated or report.leases_recovered or report.leases_given_up:
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
                    key = (f.cluster_id, e.content_hash)
                    if key not in stubs:
                        # Leave the cluster dirty: the lease winner publishes it.
                        work.append(
                            _StubWork(f.cluster_id, e.content_hash, stub_request(f, e.content))
                        )
                        continue
                    stub = stubs[key]  # None: the attempts were given up
                    if stub is not None:
                        final = build_snapshot(f, e.evidence, self.policy.severity, stub)
                marks.append(self._decide(f, final, publish))
            await unit.publish(publish)
            await unit.mark_evaluated(marks)
        report.evaluated += len(ids)
        report.published += len(publish)
        self.metrics.snapshots_published.inc(len(publish))
        return work, ids[-1]

    # -- ADR-0023 lease-then-LLM, ADR-0008 attempts ---------------------------------------------

    async def _run_stub_work(self, work: Sequence[_StubWork], report: TickReport) -> None:
        """Each cluster's stub on its own: a failure of one never touches the others, and only
        an outage of the database fails the tick (after every cluster had its turn)."""
        outages: list[TransientError] = []

        async def one(item: _StubWork) -> None:
            async with self._stub_slots:
                await self._isolated(
                    item.cluster_id, outages, self._claim_and_generate(item, report)
                )

        async with asyncio.TaskGroup() as group:
            for item in work:
                group.create_task(one(item))
        if outages:
            raise outages[0]

    async def _isolated(
        self, cluster_id: UUID, outages: list[TransientError], step: Awaitable[None]
    ) -> None:
        try:
            await step
        except TransientError as exc:  # the database: the lease waits for the recovery clause
            log.warning("rule stub work interrupted", cluster_id=str(cluster_id), error=str(exc))
            outages.append(exc)
        except Exception as exc:  # noqa: BLE001 - this cluster only
            self.metrics.stub_failures[StubFailure.UNKNOWN].inc()
            log.error(  # noqa: TRY400 - the error text is the useful part
                "rule stub work failed",
                cluster_id=str(cluster_id),
                error=f"{type(exc).__name__}: {exc}"[:500],
            )

    async def _claim_and_generate(self, item: _StubWork, report: TickReport) -> None:
        won = await self._repo.claim_stub_lease(
            item.cluster_id, item.content_hash, request_to_json(item.request), self.holder
        )
        if not won:
            report.leases_lost += 1
            self.metrics.leases[LeaseOutcome.LOST].inc()
            self.metrics.stub_attempts[StubOutcome.SKIPPED].inc()
            return
        report.leases_won += 1
        self.metrics.leases[LeaseOutcome.WON].inc()
        await self._generate(item.cluster_id, item.content_hash, item.request, 1, report)

    async def _generate(
        self,
        cluster_id: UUID,
        content_hash: str,
        request: SynthesisRequest,
        attempt: int,
        report: TickReport,
    ) -> None:
        """We hold the lease for ``attempt``: call the model, finalize (or record the failure),
        publish."""
        if self._synth is None:  # pragma: no cover - guarded by _stubs_enabled
            return
        report.model_calls += 1
        failed = await self._call_and_finalize(cluster_id, content_hash, request)
        if failed is None:
            self.metrics.model_calls[ModelOutcome.OK].inc()
            self.metrics.stub_attempts[StubOutcome.SUCCESS].inc()
        else:
            report.model_failures += 1
            self.metrics.model_calls[ModelOutcome.FAILED].inc()
            await self._record_failure(cluster_id, content_hash, attempt, failed, report)
        await self._publish_one(cluster_id, content_hash, report)

    async def _call_and_finalize(
        self, cluster_id: UUID, content_hash: str, request: SynthesisRequest
    ) -> _Failed | None:
        """None when the stub is finalized; else why the attempt failed."""
        assert self._synth is not None  # noqa: S101 - guarded by _stubs_enabled
        started = time.perf_counter()
        try:
            response = await self._synth.synthesize(request)
        except UnreadableAnswerError as exc:
            answer = unreadable_response_payload(
                body=exc.body, model=exc.model, usage=exc.usage, duration_ms=_ms(started)
            )
            return _Failed(StubFailure.INVALID_ANSWER, str(exc), answer)
        except Exception as exc:  # noqa: BLE001 - classified
            return _classify(exc)
        finally:
            self.metrics.stub_duration.observe(time.perf_counter() - started)
        if not isinstance(response, SynthesisResponse) or not isinstance(response.content, str):
            return _Failed(StubFailure.INVALID_ANSWER, "the synthesizer returned no text")
        answer = response_payload(
            content=response.content,
            model=str(response.model),
            usage=response.usage,
            duration_ms=_ms(started),
        )
        try:
            stub = parse_rule_stub(response)
        except PermanentError as exc:
            return _Failed(StubFailure.INVALID_ANSWER, str(exc), answer)
        try:
            await self._repo.finalize_stub_lease(
                cluster_id,
                content_hash,
                stub,
                str(response.model),
                usage_counts(response.usage),
                response=answer,
            )
        except TransientError:
            raise  # the database: the lease waits for the recovery clause
        except Exception as exc:  # noqa: BLE001 - this attempt only
            return _Failed(StubFailure.WRITE_STUB, f"{type(exc).__name__}: {exc}", answer)
        return None

    async def _record_failure(
        self,
        cluster_id: UUID,
        content_hash: str,
        attempt: int,
        failed: _Failed,
        report: TickReport,
    ) -> None:
        retry_in = self.policy.stub_retry(attempt, permanent=failed.permanent)
        self.metrics.stub_failures[failed.reason].inc()
        if retry_in is None and not failed.permanent:
            self.metrics.stub_failures[StubFailure.MAX_ATTEMPTS_EXCEEDED].inc()
        outcome = StubOutcome.TRANSIENT_FAILURE if retry_in else StubOutcome.PERMANENT_FAILURE
        self.metrics.stub_attempts[outcome].inc()
        error = f"{failed.reason.value}: {failed.message}"
        if retry_in is None and not failed.permanent:
            error = f"max_attempts_exceeded: {error}"
        mode = await self._repo.fail_stub_attempt(
            cluster_id,
            content_hash,
            self.holder,
            FailedStubAttempt(
                attempt=attempt,
                give_up=retry_in is None,
                retry_in=retry_in or timedelta(0),
                error=error,
                response=failed.response,
            ),
        )
        if retry_in is None and mode is not None:
            report.leases_given_up += 1
        log.warning(
            "rule stub attempt failed; publishing without a stub",
            cluster_id=str(cluster_id),
            attempt=attempt,
            reason=failed.reason.value,
            disposition="given up" if retry_in is None else f"retry in {retry_in}",
            error=escape_text(failed.message)[:300],
        )

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
        policy = self.policy
        leases, exhausted = await self._repo.recover_stub_leases(
            policy.stub_lease_timeout, self.holder, policy.batch_size, policy.stub_max_attempts
        )
        outages: list[TransientError] = []
        for gone in exhausted:
            report.leases_given_up += 1
            self.metrics.stub_failures[StubFailure.MAX_ATTEMPTS_EXCEEDED].inc()
            self.metrics.stub_attempts[StubOutcome.PERMANENT_FAILURE].inc()
            if not gone.scheduled:
                self.metrics.stub_failures[StubFailure.OUTCOME_UNKNOWN].inc()
            log.warning(
                "rule stub attempts exhausted; the cluster goes without a stub",
                cluster_id=str(gone.cluster_id),
            )
            await self._isolated(
                gone.cluster_id,
                outages,
                self._publish_one(gone.cluster_id, gone.content_hash, report),
            )
        for lease in leases:
            await self._isolated(lease.cluster_id, outages, self._retry(lease, report))
        if outages:
            raise outages[0]

    async def _retry(self, lease: RecoveredLease, report: TickReport) -> None:
        report.leases_recovered += 1
        self.metrics.leases[LeaseOutcome.RECOVERED].inc()
        if not lease.scheduled:  # its holder stopped mid-call: that attempt is used
            self.metrics.stub_failures[StubFailure.OUTCOME_UNKNOWN].inc()
        log.info(
            "recovered a rule stub lease",
            cluster_id=str(lease.cluster_id),
            attempt=lease.attempts,
            scheduled_retry=lease.scheduled,
        )
        async with self._repo.unit() as unit:
            evaluated = await self._evaluate(unit, [lease.cluster_id])
        if not evaluated or evaluated[0].content_hash != lease.content_hash:
            await self._repo.supersede_stub_lease(lease.cluster_id, lease.content_hash)
            report.leases_superseded += 1
            self.metrics.leases[LeaseOutcome.SUPERSEDED].inc()
            self.metrics.stub_attempts[StubOutcome.SKIPPED].inc()
            return
        await self._generate(
            lease.cluster_id,
            lease.content_hash,
            request_from_json(lease.request_json),
            lease.attempts,
            report,
        )


def _ms(started: float) -> int:
    return int((time.perf_counter() - started) * 1000)


def _classify(exc: Exception) -> _Failed:
    """A failed stub call: a route that cannot resolve and a refusal are permanent, a transient
    fault and anything unexpected are retried within the attempt limit."""
    if isinstance(exc, RouteError):
        return _Failed(StubFailure.ROUTER_RESOLVE, str(exc))
    if isinstance(exc, PermanentError):
        return _Failed(StubFailure.SYNTHESIZER, str(exc))
    if isinstance(exc, TransientError):
        return _Failed(StubFailure.SYNTHESIZER, str(exc), permanent=False)
    return _Failed(StubFailure.UNKNOWN, f"{type(exc).__name__}: {exc}", permanent=False)
