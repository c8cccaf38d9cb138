"""Claimed work items, a batch at a time (ADR-035 §7.1 executed per ADR-0008 and ADR-0023).

Every item of a batch goes through the same steps as if it were alone; the batch only shares
the statements and transactions of each step (one statement per kind of change, over arrays):

    lease (claimed)          the conditional claim in the consumer's transaction, or the sweep
    -> load                  the items, their ledgers and documents: one read for the batch
    -> prompt + attempt n    ONE transaction for all the batch's starts, committed BEFORE any
                             paid call (the items that fail before a call — unknown outcome,
                             attempts exhausted, no such document — end in it too)
    -> paid calls            concurrently, one per started item:
                             synthesizer.synthesize(..., idempotency_key="{item}:{n}")
    -> response              recorded as soon as it arrives, lease or no lease (paid work is
                             never dropped): answers that arrive together share one statement,
                             none waits for a call still running
    -> parse_report          validate the answers that came in (a "wave")
    -> mutation_report       one transaction per wave: the target locks of its items, once each
                             in ascending scope order; per document, its items' mutations one
                             after the other — each its own mutation row, document version and
                             reports — and the document written once at its last version; items
                             applied, threads complete; retries and dead letters of the wave
    -> parents settled       after the batch, once per parent, each under its project lock in
                             its own transaction (lock order: never the project lock while
                             holding a target lock)

A batch of one (``run_item``) takes exactly the same path.

Per item, not per batch: every write of a lease holder is guarded by the item's lease token, so
an item whose lease was lost is skipped while the others go on; a permanent failure
dead-letters its item only; a transient one schedules that item's retry; a database failure
interrupts only the items of the transaction that failed (their leases stay, and the stale-lease
recovery takes them up again).

Unknown-outcome rule (decided here, enforced by plan.py and the ledger's unique index):

* an attempt is counted when it starts — the ``prompt`` entry and ``attempt = n`` commit
  together before the call; the database refuses a second prompt for (item, n), so there is
  never more than one paid call per attempt number;
* a call whose worker dies (or loses its lease) before a response is recorded has an *unknown*
  outcome. Its attempt is used up: the stale-lease recovery records an ``error`` entry
  (``outcome_unknown``) and schedules attempt n+1 with the normal backoff, or dead-letters the
  item if n was the last attempt. So the total number of paid calls never exceeds the attempt
  limit, even across crashes;
* it is never re-sent under the same attempt number (a gateway without idempotency support
  would charge twice). Each attempt sends its own key ``work_item_id:attempt``; a gateway that
  honours ``Idempotency-Key`` deduplicates a transport-level resend of that one attempt;
* if the unknown call's answer arrives later, it is still recorded (under its attempt) and the
  next holder of the lease reuses it instead of paying again, if no newer call was started.

Failures: transient (timeouts, 5xx, 429, an unexpected exception) -> retry with backoff until
the attempt limit; permanent (4xx, no route, invalid answer, a mutation the document refuses)
-> dead_letter with an ``error`` entry. A dead-lettered item fails its thread, never its
siblings or its parent (which closes when all its children are terminal, ADR-035 §7.2).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any
from uuid import UUID, uuid4

from consumers.work_executor.metrics import (
    AttemptOutcome,
    ExecutorMetrics,
    FailureReason,
    QueueStatus,
)
from consumers.work_executor.plan import Exhausted, Reuse, Start, Unknown, next_step
from consumers.work_executor.prompts import render_story_prompt
from consumers.work_executor.repository import (
    AttemptStart,
    BatchWrite,
    BatchWritten,
    DeadLetterEnd,
    ExecutorRepository,
    LoadedItem,
    MutationApply,
    NewEntry,
    ResponseRecord,
    RetryRelease,
    StoredDocument,
)
from consumers.work_executor.retry import (
    DeadLetterReason,
    FailureKind,
    GiveUp,
    RetryAt,
    RetryPolicy,
)
from consumers.work_executor.validation import parse_report
from spectral.db.connect import is_transient
from spectral.errors import PermanentError, TransientError
from spectral.llm.router import RouteError
from spectral.llm.seam import SynthesisRequest, Synthesizer
from spectral.observability.logging import get_logger
from spectral.work.documents import (
    InvalidDocumentError,
    ReplaceEpicStories,
    StoryBacklog,
    validate_backlog,
)
from spectral.work.model import EntryType, ItemStatus

log = get_logger(__name__)

_UNKNOWN_OUTCOME = (
    "the outcome of the call is unknown: its worker died or lost the lease before a response "
    "was recorded; the attempt is counted as used"
)

Job = tuple[UUID, UUID]
"""(work_item_id, lease_token) of a claimed item."""

JobDone = Callable[[Job], None]
"""Told when a job of a batch is finished (its item's last write of this run committed)."""

Failure = tuple[FailureKind, FailureReason, str]


class CrashPoint(StrEnum):
    """Test-only fault hook (tests/faults): where a worker SIGKILLs its own process."""

    AFTER_CLAIM = "after_claim"  # leases held, nothing recorded
    BEFORE_CALL = "before_call"  # prompts and attempts committed, calls not sent
    AFTER_RESPONSE = "after_response"  # responses recorded, nothing validated or applied
    AFTER_MUTATION = "after_mutation"  # mutations committed, parents not settled


@dataclass(frozen=True)
class ExecutorConfig:
    worker_id: str
    lease_timeout_seconds: float = 300.0
    claim_grace_seconds: float = 5.0
    response_write_patience_seconds: float = 60.0
    crash_at: CrashPoint | None = None


class _PermanentItemError(Exception):
    """The item cannot be executed as asked (missing document or epic): no paid call."""


@dataclass(frozen=True)
class _Held:
    """A job whose lease this run holds (as far as it knows)."""

    job: Job
    loaded: LoadedItem

    @property
    def item_id(self) -> UUID:
        return self.job[0]

    @property
    def token(self) -> UUID:
        return self.job[1]


@dataclass(frozen=True)
class _Answer:
    """What a wave concludes: an answer to validate, or the failure of the call."""

    held: _Held
    attempt: int
    content: str = ""
    failure: Failure | None = None
    fresh: bool = False  # paid for in this run (not a recorded response reused)


@dataclass
class _Writes:
    """One transaction's worth of a batch's changes, and what each means for its item."""

    starts: list[AttemptStart] = field(default_factory=list)
    applies: list[MutationApply] = field(default_factory=list)
    releases: list[RetryRelease] = field(default_factory=list)
    dead: list[tuple[DeadLetterEnd, DeadLetterReason]] = field(default_factory=list)
    held: dict[UUID, _Held] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.starts or self.applies or self.releases or self.dead)

    def add_held(self, held: _Held) -> None:
        self.held[held.item_id] = held

    def split(self) -> list[_Writes]:
        """The same changes, one ``_Writes`` per item."""
        parts = {item_id: _Writes(held={item_id: one}) for item_id, one in self.held.items()}
        for start in self.starts:
            parts[start.loaded.item.work_item_id].starts.append(start)
        for apply in self.applies:
            parts[apply.loaded.item.work_item_id].applies.append(apply)
        for release in self.releases:
            parts[release.loaded.item.work_item_id].releases.append(release)
        for dead in self.dead:
            parts[dead[0].loaded.item.work_item_id].dead.append(dead)
        return list(parts.values())

    def batch(self) -> BatchWrite:
        return BatchWrite(
            starts=self.starts,
            applies=self.applies,
            releases=self.releases,
            dead_letters=[dead for dead, _ in self.dead],
        )


class _Run:
    """The outcomes of one batch, reported per job as each ends."""

    def __init__(self, metrics: ExecutorMetrics, done: JobDone | None) -> None:
        self._metrics = metrics
        self._done = done
        self.outcomes: dict[Job, AttemptOutcome] = {}
        self.parents: dict[UUID, str] = {}

    def end(self, job: Job, outcome: AttemptOutcome) -> None:
        if job in self.outcomes:
            return
        self.outcomes[job] = outcome
        self._metrics.attempt(outcome)
        if self._done is not None:
            self._done(job)

    def ended_item(self, held: _Held, outcome: AttemptOutcome) -> None:
        """The item reached a terminal state: its parent (if any) is settled after the batch."""
        parent = held.loaded.parent_thread_id
        if parent is not None:
            self.parents[parent] = held.loaded.item.project_id
        self.end(held.job, outcome)

    def interrupted(self, jobs: Sequence[Job], exc: BaseException) -> None:
        """The database failed under these items (or a bug): their leases stay, and the
        stale-lease recovery takes them up again after the timeout, reading what happened from
        the ledger."""
        jobs = [job for job in jobs if job not in self.outcomes]
        if not jobs:
            return
        reason = FailureReason.LOAD_ROW if is_transient(exc) else FailureReason.UNKNOWN
        log.warning(
            "work items interrupted; they will be recovered",
            work_item_ids=[str(item) for item, _ in jobs],
            error=f"{type(exc).__name__}: {exc}",
        )
        for job in jobs:
            self._metrics.failure(reason)
            self.end(job, AttemptOutcome.TRANSIENT_FAILURE)


class _ResponseRecorder:
    """Group commit of paid answers: each is written as soon as the writer is free, together
    with whatever else arrived meanwhile — never held back for a call still running."""

    def __init__(self, write: Callable[[Sequence[ResponseRecord]], Awaitable[None]]) -> None:
        self._write = write
        self._waiting: list[tuple[ResponseRecord, asyncio.Future[None]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def record(self, response: ResponseRecord) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((response, future))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_waiting())
        await future

    async def _write_waiting(self) -> None:
        await asyncio.sleep(0)  # answers that came in on the same turn of the loop join
        while self._waiting:
            group, self._waiting = self._waiting, []
            try:
                await self._write([response for response, _ in group])
            except Exception as exc:  # noqa: BLE001 - handed to the callers
                if is_transient(exc) or len(group) < 2:  # noqa: PLR2004 - alone already
                    _resolve(group, exc)
                    continue
                log.warning(
                    "recording paid responses together failed; recording them one by one",
                    responses=len(group),
                    error=f"{type(exc).__name__}: {exc}",
                )
                for one in group:  # a data problem of one answer: the others still go in
                    try:
                        await self._write([one[0]])
                    except Exception as one_exc:  # noqa: BLE001 - handed to its caller
                        _resolve([one], one_exc)
                    else:
                        _resolve([one], None)
            else:
                _resolve(group, None)


def _resolve(
    waiting: Sequence[tuple[ResponseRecord, asyncio.Future[None]]], exc: Exception | None
) -> None:
    for _, future in waiting:
        if future.done():
            continue
        if exc is None:
            future.set_result(None)
        else:
            future.set_exception(exc)


class WorkExecutor:
    def __init__(
        self,
        repository: ExecutorRepository,
        synthesizer: Synthesizer,
        policy: RetryPolicy,
        metrics: ExecutorMetrics,
        config: ExecutorConfig,
    ) -> None:
        self._repo = repository
        self._synthesizer = synthesizer
        self._policy = policy
        self._metrics = metrics
        self._config = config

    @property
    def worker_id(self) -> str:
        return self._config.worker_id

    def _crash_point(self, point: CrashPoint) -> None:
        if self._config.crash_at is point:
            log.warning("fault hook: SIGKILL", point=point.value)
            os.kill(os.getpid(), signal.SIGKILL)

    # -- a batch ----------------------------------------------------------------------------------

    async def run_item(self, item_id: UUID, token: UUID) -> AttemptOutcome:
        """Drive one claimed item as far as it goes now (a batch of one)."""
        outcomes = await self.run_batch([(item_id, token)])
        return outcomes.get((item_id, token), AttemptOutcome.SKIPPED)

    async def run_batch(
        self, jobs: Sequence[Job], done: JobDone | None = None
    ) -> dict[Job, AttemptOutcome]:
        """Drive claimed items as far as they go now; returns each job's attempt outcome.
        ``done`` is told about each job as soon as it is finished."""
        run = _Run(self._metrics, done)
        jobs = list(dict.fromkeys(jobs))
        try:
            await self._run(run, jobs)
        except Exception as exc:  # noqa: BLE001 - any failure leaves the leases to recovery
            run.interrupted(jobs, exc)
        for job in jobs:
            run.end(job, AttemptOutcome.SKIPPED)  # none is left: only a safety net
        await self._settle_parents(run.parents)
        return run.outcomes

    async def _run(self, run: _Run, jobs: Sequence[Job]) -> None:
        loaded = await self._repo.load_batch([item for item, _ in jobs])
        held: list[_Held] = []
        for job in jobs:
            item = loaded.items.get(job[0])
            if (
                item is None
                or item.item.lease_token != job[1]
                or item.item.status not in (ItemStatus.CLAIMED, ItemStatus.RUNNING)
            ):
                run.end(job, AttemptOutcome.SKIPPED)
            else:
                held.append(_Held(job, item))
        if not held:
            return
        self._crash_point(CrashPoint.AFTER_CLAIM)
        before, reused, requests = self._plan(held, loaded.documents)
        calls: dict[asyncio.Task[_Answer], _Held] = {}
        if before:
            written = await self._write(run, before)
            calls = self._call_all(before, written, requests)
        try:
            await self._conclude_as_answered(run, reused, calls)
        except asyncio.CancelledError:
            for task in calls:  # shutdown: the calls in flight go too (their leases stay)
                task.cancel()
            raise

    async def _write(self, run: _Run, writes: _Writes) -> BatchWritten:
        """One transaction for ``writes``, accounted item by item. If it fails for a reason
        that is not transient, its items are written one by one instead, so a bad item only
        fails itself; items whose write still fails are interrupted (left to recovery)."""
        try:
            written = await self._repo.write(writes.batch())
        except Exception as exc:  # noqa: BLE001 - per item below
            written = BatchWritten()
            if is_transient(exc) or len(writes.held) < 2:  # noqa: PLR2004 - alone already
                run.interrupted([one.job for one in writes.held.values()], exc)
                return written
            log.warning(
                "a batch write failed for a data reason; writing its items one by one",
                items=len(writes.held),
                error=f"{type(exc).__name__}: {exc}",
            )
            for part in writes.split():
                try:
                    written.merge(await self._repo.write(part.batch()))
                except Exception as one_exc:  # noqa: BLE001 - this item only
                    run.interrupted([one.job for one in part.held.values()], one_exc)
        self._account(run, writes, written)
        return written

    def _plan(
        self, held: Sequence[_Held], documents: Mapping[str, StoredDocument]
    ) -> tuple[_Writes, list[_Answer], dict[UUID, SynthesisRequest]]:
        """What each held item does next, read from its ledger (plan.py): the writes before
        the calls, the recorded answers to reuse, the requests of the attempts to start."""
        before = _Writes()
        reused: list[_Answer] = []
        requests: dict[UUID, SynthesisRequest] = {}
        backlogs: dict[str, StoryBacklog | InvalidDocumentError] = {}
        for one in held:
            step = next_step(one.loaded.item.attempt, one.loaded.entries, self._policy)
            if isinstance(step, Reuse):
                log.info(
                    "reusing a recorded response",
                    work_item_id=str(one.item_id),
                    attempt=step.attempt,
                )
                reused.append(_Answer(one, step.attempt, content=step.content))
            elif isinstance(step, Unknown):
                failure = (
                    FailureKind.OUTCOME_UNKNOWN,
                    FailureReason.OUTCOME_UNKNOWN,
                    _UNKNOWN_OUTCOME,
                )
                self._fail(before, one, step.attempt, failure)
            elif isinstance(step, Exhausted):
                self._give_up(
                    before,
                    one,
                    attempt=step.attempts,
                    dead=DeadLetterReason.MAX_ATTEMPTS_EXCEEDED,
                    reason=FailureReason.MAX_ATTEMPTS_EXCEEDED,
                    message=f"all {step.attempts} attempts are used",
                )
            else:
                self._start(
                    before, one, step, documents=documents, backlogs=backlogs, requests=requests
                )
        return before, reused, requests

    def _start(
        self,
        before: _Writes,
        one: _Held,
        step: Start,
        *,
        documents: Mapping[str, StoredDocument],
        backlogs: dict[str, StoryBacklog | InvalidDocumentError],
        requests: dict[UUID, SynthesisRequest],
    ) -> None:
        try:
            request = _request(one.loaded, step.attempt, documents, backlogs)
        except _PermanentItemError as exc:
            self._give_up(
                before,
                one,
                attempt=one.loaded.item.attempt,
                dead=DeadLetterReason.PERMANENT_FAILURE,
                reason=FailureReason.LOAD_ROW,
                message=str(exc),
            )
            return
        prompt = {
            "function_key": request.function_key,
            "prompt": request.prompt,
            "input": dict(request.input),
            "idempotency_key": request.idempotency_key,
            "org_id": request.org_id,
        }
        before.starts.append(AttemptStart(one.loaded, one.token, step.attempt, prompt))
        before.add_held(one)
        requests[one.item_id] = request

    def _call_all(
        self, before: _Writes, written: BatchWritten, requests: Mapping[UUID, SynthesisRequest]
    ) -> dict[asyncio.Task[_Answer], _Held]:
        """Send the paid calls of the attempts that started, all at once."""
        started = [s for s in before.starts if s.loaded.item.work_item_id in written.started]
        if not started:
            return {}
        self._crash_point(CrashPoint.BEFORE_CALL)
        recorder = _ResponseRecorder(self._record_responses)
        calls: dict[asyncio.Task[_Answer], _Held] = {}
        for start in started:
            one = before.held[start.loaded.item.work_item_id]
            task = asyncio.create_task(
                self._call(one, start.attempt, requests[one.item_id], recorder)
            )
            calls[task] = one
        return calls

    async def _call(
        self, one: _Held, attempt: int, request: SynthesisRequest, recorder: _ResponseRecorder
    ) -> _Answer:
        started = time.perf_counter()
        try:
            response = await self._synthesizer.synthesize(request)
        except Exception as exc:  # noqa: BLE001 - classified; unexpected ones are retried
            return _Answer(one, attempt, failure=classify_call_failure(exc))
        finally:
            self._metrics.duration.observe(time.perf_counter() - started)
        payload: Mapping[str, Any] = {
            "content": response.content,
            "model": response.model,
            "usage": dict(response.usage),
            "duration_ms": int((time.perf_counter() - started) * 1000),
        }
        await recorder.record(ResponseRecord(one.loaded, attempt, payload))
        return _Answer(one, attempt, content=response.content, fresh=True)

    async def _record_responses(self, responses: Sequence[ResponseRecord]) -> None:
        """Write paid answers, retrying through a database hiccup: they must not be lost."""
        deadline = time.monotonic() + self._config.response_write_patience_seconds
        delay = 0.2
        while True:
            try:
                await self._repo.write(BatchWrite(responses=responses))
            except Exception as exc:
                if not is_transient(exc) or time.monotonic() + delay > deadline:
                    raise
                log.warning(
                    "recording paid responses failed; retrying",
                    work_item_ids=[str(r.loaded.item.work_item_id) for r in responses],
                    error=f"{type(exc).__name__}: {exc}",
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            return

    async def _conclude_as_answered(
        self, run: _Run, reused: list[_Answer], calls: dict[asyncio.Task[_Answer], _Held]
    ) -> None:
        """Conclude answers in waves, as they come in: reused ones first (while the calls run),
        then whatever calls finished together since the last wave."""
        ready = reused
        pending = set(calls)
        while ready or pending:
            if ready:
                await self._conclude(run, ready)
                ready = []
            if pending:
                finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in finished:
                    exc = task.exception()
                    if exc is None:
                        ready.append(task.result())
                    else:  # the response could not be recorded
                        run.interrupted([calls[task].job], exc)

    async def _conclude(self, run: _Run, answers: Sequence[_Answer]) -> None:
        """One wave: validate the answers, then apply, retry or dead-letter — one transaction."""
        if any(answer.fresh for answer in answers):
            self._crash_point(CrashPoint.AFTER_RESPONSE)
        wave = _Writes()
        for answer in answers:
            if answer.failure is not None:
                self._fail(wave, answer.held, answer.attempt, answer.failure)
            else:
                self._validate(wave, answer)
        written = await self._write(run, wave)
        if written.refused:
            await self._refused(run, wave, written.refused)
        if written.applied:
            self._crash_point(CrashPoint.AFTER_MUTATION)

    def _validate(self, wave: _Writes, answer: _Answer) -> None:
        one, attempt = answer.held, answer.attempt
        report = parse_report(answer.content)
        parse_entry = NewEntry(attempt, EntryType.PARSE_REPORT, report.payload(attempt))
        if not report.ok:
            self._give_up(
                wave,
                one,
                attempt=attempt,
                dead=DeadLetterReason.INVALID_OUTPUT,
                reason=FailureReason.INVALID_JSON,
                message="the answer is not valid: " + "; ".join(report.errors)[:500],
                extra=(parse_entry,),
            )
            return
        item = one.loaded.item
        mutation = ReplaceEpicStories.for_item(
            item.work_item_id,
            str(item.input["document_id"]),
            str(item.input["epic_id"]),
            report.stories,
        )
        wave.applies.append(
            MutationApply(one.loaded, one.token, mutation, attempt, parse_entry.payload)
        )
        wave.add_held(one)

    async def _refused(self, run: _Run, wave: _Writes, refused: Mapping[UUID, str]) -> None:
        """Mutations the document refused: their items are dead-lettered (a transaction of
        their own; nothing was written for them in the wave's)."""
        ends = _Writes()
        for apply in wave.applies:
            item_id = apply.loaded.item.work_item_id
            if item_id in refused:
                self._give_up(
                    ends,
                    wave.held[item_id],
                    attempt=apply.attempt,
                    dead=DeadLetterReason.PERMANENT_FAILURE,
                    reason=FailureReason.WRITE_MUTATION,
                    message=f"the mutation was refused: {refused[item_id]}",
                    extra=(NewEntry(apply.attempt, EntryType.PARSE_REPORT, apply.parse_payload),),
                )
        await self._write(run, ends)

    # -- failures -------------------------------------------------------------------------------

    def _fail(self, writes: _Writes, one: _Held, attempt: int, failure: Failure) -> None:
        """A failed attempt: retry after the backoff, or give up (policy)."""
        kind, reason, message = failure
        self._metrics.failure(reason)
        decision = self._policy.after_failure(attempt, kind, datetime.now(UTC))
        error = {
            "kind": kind.value,
            "reason": reason.value,
            "message": message[:2000],
            "attempt": attempt,
        }
        writes.add_held(one)
        if isinstance(decision, RetryAt):
            writes.releases.append(
                RetryRelease(
                    one.loaded,
                    one.token,
                    attempt,
                    {**error, "disposition": "retry"},
                    self._policy.backoff(attempt),
                )
            )
            return
        assert isinstance(decision, GiveUp)  # noqa: S101 - the two outcomes of after_failure
        if decision.reason is DeadLetterReason.MAX_ATTEMPTS_EXCEEDED:
            self._metrics.failure(FailureReason.MAX_ATTEMPTS_EXCEEDED)
        _dead_letter(writes, one, attempt, decision.reason, error)

    def _give_up(
        self,
        writes: _Writes,
        one: _Held,
        *,
        attempt: int,
        dead: DeadLetterReason,
        reason: FailureReason,
        message: str,
        extra: tuple[NewEntry, ...] = (),
    ) -> None:
        self._metrics.failure(reason)
        error = {
            "kind": FailureKind.PERMANENT.value,
            "reason": reason.value,
            "message": message[:2000],
            "attempt": attempt,
        }
        writes.add_held(one)
        _dead_letter(writes, one, attempt, dead, error, extra=extra)

    def _account(self, run: _Run, writes: _Writes, written: BatchWritten) -> None:
        """Outcomes, metrics and logs of what a transaction did, item by item."""
        for item_id in sorted(written.lost):
            log.info("lease lost; leaving the item to its new holder", work_item_id=str(item_id))
            run.end(writes.held[item_id].job, AttemptOutcome.SKIPPED)
        for release in writes.releases:
            item_id = release.loaded.item.work_item_id
            if item_id in written.released:
                log.info(
                    "attempt failed; retry scheduled",
                    work_item_id=str(item_id),
                    attempt=release.attempt,
                    reason=str(release.error.get("reason", "")),
                    not_before=written.released[item_id].isoformat(),
                )
                run.end(writes.held[item_id].job, AttemptOutcome.TRANSIENT_FAILURE)
        for dead, dead_reason in writes.dead:
            item_id = dead.loaded.item.work_item_id
            if item_id in written.dead_lettered:
                self._metrics.dead_lettered(dead_reason)
                log.warning(
                    "work item dead-lettered",
                    work_item_id=str(item_id),
                    attempt=dead.attempt,
                    reason=dead_reason.value,
                    message=str(dead.error.get("message", ""))[:300],
                )
                run.ended_item(writes.held[item_id], AttemptOutcome.PERMANENT_FAILURE)
        if written.applied:
            for item_id, applied in written.applied.items():
                log.debug(
                    "work item applied",
                    work_item_id=str(item_id),
                    document_version=applied.result_version,
                )
                run.ended_item(writes.held[item_id], AttemptOutcome.SUCCESS)
            log.info(
                "work items applied",
                items=len(written.applied),
                documents=len({a.mutation.document_id for a in writes.applies}),
            )

    # -- orchestration ----------------------------------------------------------------------------

    async def _settle_parents(self, parents: Mapping[UUID, str]) -> None:
        """Once per parent of the batch's ended items, after their transactions committed."""
        if not parents:
            return
        try:
            due = await self._repo.parents_needing_settling(list(parents))
        except Exception as exc:  # noqa: BLE001 - the sweep settles parents left open
            log.warning("settling the parents failed; the sweep will", error=str(exc))
            return
        for parent_id, project_id in due:
            try:
                status = await self._repo.settle_parent(parent_id, project_id)
            except Exception as exc:  # noqa: BLE001 - the sweep settles parents left open
                log.warning("settling the parent failed; the sweep will", error=str(exc))
                continue
            if status is not None:
                log.info("orchestration closed", thread_id=str(parent_id), status=status.value)

    # -- the sweep (periodic) ----------------------------------------------------------------------

    async def sweep(self, capacity: int) -> list[Job]:
        """Recover stale leases, claim due items no event brought, settle parents left open,
        refresh the queue gauges. Returns the claimed jobs (at most ``capacity``)."""
        jobs: list[Job] = []
        if capacity > 0:
            token = uuid4()
            recovered = await self._repo.recover_stale(
                self._config.lease_timeout_seconds, capacity, token, self.worker_id
            )
            if recovered:
                log.warning("recovered stale leases", items=len(recovered))
            jobs.extend((item_id, token) for item_id in recovered)
        if capacity - len(jobs) > 0:
            token = uuid4()
            due = await self._repo.claim_due(
                capacity - len(jobs), token, self.worker_id, self._config.claim_grace_seconds
            )
            jobs.extend((item_id, token) for item_id in due)
        for parent_id, project_id in await self._repo.parents_to_settle(100):
            await self._repo.settle_parent(parent_id, project_id)
        self._metrics.oldest_lease_age.set(await self._repo.oldest_lease_age())
        depth = await self._repo.queue_depth()
        self._metrics.observe_queue(
            {status: depth.get(status.value, 0) for status in QueueStatus},
            depth.get(ItemStatus.DEAD_LETTER.value, 0),
        )
        return jobs


def _request(
    loaded: LoadedItem,
    attempt: int,
    documents: Mapping[str, StoredDocument],
    backlogs: dict[str, StoryBacklog | InvalidDocumentError],
) -> SynthesisRequest:
    """The paid call of ``attempt``; ``backlogs`` caches each document's validation for the
    batch."""
    item = loaded.item
    document_id = str(item.input.get("document_id", ""))
    epic_id = str(item.input.get("epic_id", ""))
    document = documents.get(document_id)
    if document is None:
        raise _PermanentItemError(f"document {document_id!r} does not exist")
    backlog = backlogs.get(document_id)
    if backlog is None:
        try:
            backlog = validate_backlog(document.content)
        except InvalidDocumentError as exc:
            backlog = exc
        backlogs[document_id] = backlog
    if isinstance(backlog, InvalidDocumentError):
        raise _PermanentItemError(str(backlog))
    epic = backlog.epics.get(epic_id)
    if epic is None:
        raise _PermanentItemError(f"document {document_id!r} has no epic {epic_id!r}")
    prompt, data = render_story_prompt(epic_id=epic_id, epic=epic, backlog_title=backlog.title)
    org = item.input.get("org_id")
    return SynthesisRequest(
        function_key=item.function_key,
        prompt=prompt,
        input={**data, "document_id": document_id},
        idempotency_key=f"{item.work_item_id}:{attempt}",
        org_id=str(org) if org else None,
    )


def _dead_letter(
    writes: _Writes,
    one: _Held,
    attempt: int,
    dead: DeadLetterReason,
    error: Mapping[str, Any],
    *,
    extra: tuple[NewEntry, ...] = (),
) -> None:
    payload = {**error, "disposition": "dead_letter", "dead_letter_reason": dead.value}
    writes.dead.append((DeadLetterEnd(one.loaded, one.token, attempt, payload, extra), dead))


def classify_call_failure(exc: Exception) -> tuple[FailureKind, FailureReason, str]:
    """What a failed synthesizer call means for the item: a route that cannot resolve and a
    refusal are permanent, a transient fault is retried, anything unexpected is retried within
    the attempt limit."""
    if isinstance(exc, RouteError):
        return FailureKind.PERMANENT, FailureReason.ROUTER_RESOLVE, str(exc)
    if isinstance(exc, PermanentError):
        return FailureKind.PERMANENT, FailureReason.SYNTHESIZER, str(exc)
    if isinstance(exc, TransientError):
        return FailureKind.TRANSIENT, FailureReason.SYNTHESIZER, str(exc)
    return FailureKind.TRANSIENT, FailureReason.UNKNOWN, f"{type(exc).__name__}: {exc}"
