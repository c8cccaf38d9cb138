"""Claimed work items, a batch at a time (ADR-035 §7.1 executed per ADR-0008 and ADR-0023).

Each item goes lease -> load -> prompt + attempt n (committed before any paid call) -> paid call
-> response (journaled, then recorded) -> parse_report -> mutation_report -> parents settled; a
batch only shares each step's statements and transactions. Every failure ends its own item
alone; an attempt is counted when it starts, so there is never more than one new paid call per
attempt (a call whose outcome is unknown may be re-issued under its own idempotency key:
outcomes.py). The steps, the unknown-outcome rule, failures, spend and cancellation are explained in
docs/explanation/work-ledger.md ("How the executor runs a batch").
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TypeVar
from uuid import UUID, uuid4

from consumers.work_executor.batch import Answer, Failure, Held, Run, Writes, dead_letter
from consumers.work_executor.calls import answer_payload, classify_call_failure, ms_since
from consumers.work_executor.journal import ResponseJournal
from consumers.work_executor.metrics import (
    AttemptOutcome,
    ExecutorMetrics,
    FailureReason,
    QueueStatus,
)
from consumers.work_executor.outcomes import UnknownOutcomePolicy
from consumers.work_executor.patience import patiently
from consumers.work_executor.plan import (
    REISSUE,
    Exhausted,
    Reuse,
    Start,
    Step,
    Unknown,
    is_reissue,
    next_step,
)
from consumers.work_executor.pool import Job, JobDone
from consumers.work_executor.reads import LoadedBatch, LoadedItem
from consumers.work_executor.recorder import ResponseRecorder
from consumers.work_executor.retry import (
    DeadLetterReason,
    FailureKind,
    GiveUp,
    RetryDecision,
    RetryStrategy,
)
from consumers.work_executor.store import Store
from consumers.work_executor.transitions import (
    AttemptStart,
    BatchWrite,
    BatchWritten,
    CancelEnd,
    MutationApply,
    NewEntry,
    Requeue,
    ResponseRecord,
    RetryRelease,
    SpendOutcome,
)
from producers.work.domain.documents import StoredDocument
from producers.work.domain.functions import Functions, ItemRefusedError
from producers.work.domain.model import EntryType, ItemStatus
from producers.work.domain.payloads import (
    error_payload,
    prompt_payload,
    unreadable_response_payload,
)
from spectral.llm.limits import ProviderLimits
from spectral.llm.seam import (
    CallRefusedError,
    CallTimedOutError,
    RateLimitedError,
    RequestRejectedError,
    SynthesisRequest,
    Synthesizer,
    UnreadableAnswerError,
)
from spectral.observability.logging import get_logger
from spectral.retry import Backoff

log = get_logger(__name__)

T = TypeVar("T")

_UNKNOWN_OUTCOME = (
    "the outcome of the call is unknown: its worker died or lost the lease before a response "
    "was recorded; the attempt is counted as used"
)


@dataclass(frozen=True)
class _TimedOut:
    """A call that timed out after ``seconds``: its request left, its outcome is unknown."""

    seconds: float
    error: Exception


@dataclass(frozen=True)
class ExecutorConfig:
    worker_id: str
    lease_timeout_seconds: float = 300.0
    journal_dir: Path | None = None
    """Where paid answers are journaled until the ledger has them (journal.py); None keeps
    them in memory only (tests and benchmarks: a crash may then lose an answer)."""
    call_timeout_seconds: float | None = None
    """A paid call taking longer is abandoned as a transient failure of its attempt (the
    synthesizer's own timeout normally ends it first)."""
    database_retry_cap_seconds: float = 5.0
    """The longest wait between two tries of a statement while the database is unavailable."""
    limits: ProviderLimits = field(default_factory=ProviderLimits)
    """Provider limits per model route: the ``max_tokens`` each call sends."""
    unknown_outcomes: UnknownOutcomePolicy = field(default_factory=UnknownOutcomePolicy)
    """What resolves a call whose outcome is unknown: re-issued under its idempotency key, or
    its reservation released after a horizon (outcomes.py)."""


class WorkExecutor:
    def __init__(
        self,
        store: Store,
        synthesizer: Synthesizer,
        policy: RetryStrategy,
        metrics: ExecutorMetrics,
        config: ExecutorConfig,
        *,
        functions: Functions,
        on_capacity: Callable[[], None] | None = None,
    ) -> None:
        self._reads = store.reads
        self._transitions = store.transitions
        self._parents = store.parents
        self._functions = functions
        self._synthesizer = synthesizer
        self._policy = policy
        self._metrics = metrics
        self._config = config
        self._on_capacity = on_capacity
        """Told when a call ends (its route has room again): the dispatcher claims more."""
        self._backoff = Backoff(base=0.2, cap=config.database_retry_cap_seconds)
        journal = (
            ResponseJournal(config.journal_dir, config.worker_id)
            if config.journal_dir is not None
            else None
        )
        self._recorder = ResponseRecorder(
            journal, self._write_responses, self._write_responses_patiently, metrics
        )
        self._in_flight: Counter[UUID] = Counter()

    @property
    def worker_id(self) -> str:
        return self._config.worker_id

    async def aclose(self) -> None:
        """Stop recording (answers not yet in the ledger stay in the journal for the next
        executor) and release the journal's files."""
        await self._recorder.aclose()

    async def _patiently(self, what: str, operation: Callable[[], Awaitable[T]]) -> T:
        return await patiently(
            what, operation, backoff=self._backoff, on_retry=self._metrics.database_wait
        )

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
        run = Run(self._metrics, done)
        jobs = list(dict.fromkeys(jobs))
        self._in_flight.update(item for item, _ in jobs)
        try:
            try:
                await self._run(run, jobs)
            except Exception as exc:  # noqa: BLE001 - a bug: the leases are left to recovery
                run.interrupted(jobs, exc)
            for job in jobs:
                run.end(job, AttemptOutcome.SKIPPED)  # none is left: only a safety net
            await self._settle_parents(run.parents)
        finally:
            self._in_flight.subtract(item for item, _ in jobs)
            self._in_flight = +self._in_flight
        return run.outcomes

    async def _run(self, run: Run, jobs: Sequence[Job]) -> None:
        loaded = await self._load(run, jobs)
        held: list[Held] = []
        for job in jobs:
            if job in run.outcomes:
                continue
            item = loaded.items.get(job[0])
            if (
                item is None
                or item.item.lease_token != job[1]
                or item.item.status not in (ItemStatus.CLAIMED, ItemStatus.RUNNING)
            ):
                run.end(job, AttemptOutcome.SKIPPED)
            else:
                held.append(Held(job, item))
        if not held:
            return
        before, reused, requests = self._plan(held, loaded.documents)
        calls: dict[asyncio.Task[Answer], Held] = {}
        if before:
            written = await self._write(run, before)
            calls = self._call_all(before, written, requests)
        try:
            await self._conclude_as_answered(run, reused, calls)
        except asyncio.CancelledError:
            for task in calls:  # shutdown: the calls in flight go too (their leases stay)
                task.cancel()
            raise

    async def _load(self, run: Run, jobs: Sequence[Job]) -> LoadedBatch:
        """The batch's items, waiting out an outage. If the batch cannot be read for another
        reason, its items are read one by one, and an item that cannot be read ends."""
        ids = [item for item, _ in jobs]
        try:
            return await self._patiently("load items", lambda: self._reads.load_batch(ids))
        except Exception as exc:  # noqa: BLE001 - per item below
            log.warning(
                "a batch of work items could not be loaded; loading them one by one",
                items=len(ids),
                error=f"{type(exc).__name__}: {exc}"[:300],
            )
        items: dict[UUID, LoadedItem] = {}
        documents: dict[str, StoredDocument] = {}
        for job in jobs:
            try:
                one = await self._patiently(
                    "load an item", partial(self._reads.load_batch, [job[0]])
                )
            except Exception as exc:  # noqa: BLE001 - this item only
                await self._end_unloadable(run, job, exc)
                continue
            items.update(one.items)
            documents.update(one.documents)
        return LoadedBatch(items, documents)

    async def _end_unloadable(self, run: Run, job: Job, exc: Exception) -> None:
        try:
            bare = await self._patiently("load an item", lambda: self._reads.load_bare(job[0]))
        except Exception as bare_exc:  # noqa: BLE001 - nothing more can be done here
            run.interrupted([job], bare_exc)
            return
        if bare is None or bare.item.lease_token != job[1]:
            run.end(job, AttemptOutcome.SKIPPED)
            return
        ends = Writes()
        self._give_up(
            ends,
            Held(job, bare),
            attempt=bare.item.attempt,
            dead=DeadLetterReason.PERMANENT_FAILURE,
            reason=FailureReason.LOAD_ROW,
            message=f"the item could not be read: {type(exc).__name__}: {exc}",
        )
        await self._write(run, ends)

    async def _write(self, run: Run, writes: Writes) -> BatchWritten:
        """One transaction for ``writes``, waiting out any outage, accounted item by item. If it
        fails for a reason that is not an outage, its items are written one by one instead,
        so a bad item only fails itself; an item whose own changes still cannot be written is
        dead-lettered (``_end_unwritable``)."""
        if not writes:
            return BatchWritten()
        try:
            written = await self._patiently(
                "record work items", lambda: self._transitions.write(writes.batch())
            )
        except Exception as exc:  # noqa: BLE001 - per item
            written = await self._write_one_by_one(run, writes, exc)
        self._account(run, writes, written)
        return written

    async def _write_one_by_one(self, run: Run, writes: Writes, exc: Exception) -> BatchWritten:
        parts = writes.split()
        if len(parts) == 1:
            await self._end_unwritable(run, parts[0], exc)
            return BatchWritten()
        log.warning(
            "a batch write failed for a data reason; writing its items one by one",
            items=len(parts),
            error=f"{type(exc).__name__}: {exc}"[:300],
        )
        written = BatchWritten()
        for part in parts:
            try:
                written.merge(
                    await self._patiently(
                        "record a work item", partial(self._transitions.write, part.batch())
                    )
                )
            except Exception as one_exc:  # noqa: BLE001 - this item only
                await self._end_unwritable(run, part, one_exc)
        return written

    async def _end_unwritable(self, run: Run, part: Writes, exc: Exception) -> None:
        """The last resort for an item whose changes the database refuses (not an outage): a
        dead letter with only an ``error`` entry saying why — and if even that is refused, a
        plain one; failing that the lease is left to recovery."""
        (one,) = part.held.values()
        attempt = part.attempt_of(one)
        reason = FailureReason.WRITE_MUTATION if part.applies else FailureReason.UNKNOWN
        detail = f"{type(exc).__name__}: {exc}"
        log.error(
            "the changes of a work item were refused; dead-lettering it",
            work_item_id=str(one.item_id),
            attempt=attempt,
            error=detail[:500],
        )
        for message in (
            f"its changes could not be recorded: {detail}",
            "its changes could not be recorded",
        ):
            ends = Writes()
            self._give_up(
                ends,
                one,
                attempt=attempt,
                dead=DeadLetterReason.PERMANENT_FAILURE,
                reason=reason,
                message=message,
            )
            try:
                written = await self._patiently(
                    "dead-letter a work item", partial(self._transitions.write, ends.batch())
                )
            except Exception as end_exc:  # noqa: BLE001 - try the plainer form, then give up
                last: Exception = end_exc
                continue
            self._account(run, ends, written)
            return
        run.interrupted([one.job], last)

    def _plan(
        self, held: Sequence[Held], documents: Mapping[str, StoredDocument]
    ) -> tuple[Writes, list[Answer], dict[UUID, SynthesisRequest]]:
        """What each held item does next, read from its ledger (plan.py): the writes before
        the calls, the recorded answers to reuse, the requests of the attempts to start. An
        item that cannot be planned is dead-lettered (no call)."""
        before = Writes()
        reused: list[Answer] = []
        requests: dict[UUID, SynthesisRequest] = {}
        for one in held:
            mine = Writes()
            try:
                answer = self._plan_one(mine, one, documents, requests)
            except Exception as exc:  # noqa: BLE001 - this item only
                requests.pop(one.item_id, None)
                mine = Writes()
                self._give_up(
                    mine,
                    one,
                    attempt=one.loaded.item.attempt,
                    dead=DeadLetterReason.PERMANENT_FAILURE,
                    reason=FailureReason.UNKNOWN,
                    message=f"the item could not be planned: {type(exc).__name__}: {exc}",
                )
                answer = None
            before.merge(mine)
            if answer is not None:
                reused.append(answer)
        return before, reused, requests

    def _plan_one(
        self,
        before: Writes,
        one: Held,
        documents: Mapping[str, StoredDocument],
        requests: dict[UUID, SynthesisRequest],
    ) -> Answer | None:
        step = next_step(one.loaded.item.attempt, one.loaded.entries, self._policy)
        if one.loaded.item.cancel_requested_at is not None:
            self._cancel(before, one, step)
            return None
        if isinstance(step, Start) and not one.loaded.reserved:
            log.info(
                "no spend reserved for the next attempt; handing the item back to the queue",
                work_item_id=str(one.item_id),
            )
            before.requeues.append(Requeue(one.loaded, one.token))
            before.add_held(one)
            return None
        if isinstance(step, Reuse):
            log.info(
                "reusing a recorded response", work_item_id=str(one.item_id), attempt=step.attempt
            )
            return Answer(one, step.attempt, content=step.content)
        if isinstance(step, Unknown) and self._config.unknown_outcomes.reissues(step):
            self._reissue(before, one, step, requests)
        elif isinstance(step, Unknown):
            failure = (FailureKind.OUTCOME_UNKNOWN, FailureReason.OUTCOME_UNKNOWN, _UNKNOWN_OUTCOME)
            self._fail(before, one, step.attempt, failure, spend=SpendOutcome.UNKNOWN)
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
            self._start(before, one, step, documents=documents, requests=requests)
        return None

    def _cancel(self, before: Writes, one: Held, step: Step) -> None:
        """The item's cancellation was asked for before its next step: no call. A recorded
        answer stays in the ledger (not applied); an attempt whose outcome is unknown keeps its
        spend counted."""
        item = one.loaded.item
        if isinstance(step, Reuse):
            attempt, spend = step.attempt, None
            message = "canceled: its recorded answer is kept in the ledger, not applied"
        elif isinstance(step, Unknown):
            attempt, spend = step.attempt, SpendOutcome.UNKNOWN
            message = "canceled: " + _UNKNOWN_OUTCOME
        else:
            attempt, spend = item.attempt, None
            message = "canceled before its next attempt started: no call was made"
        before.cancels.append(CancelEnd(one.loaded, one.token, attempt, message, spend))
        before.add_held(one)

    def _start(
        self,
        before: Writes,
        one: Held,
        step: Start,
        *,
        documents: Mapping[str, StoredDocument],
        requests: dict[UUID, SynthesisRequest],
    ) -> None:
        """Attempt ``step.attempt`` starts: its work function asks (no call if it refuses)."""
        refused = ""
        item = one.loaded.item
        function = self._functions.for_key(item.function_key)
        try:
            if function is None:
                refused = f"no work function {item.function_key!r} is installed"
            else:
                ask = function.ask(item, documents)
        except ItemRefusedError as exc:
            refused = str(exc) or "the work function refused the item"
        if function is None or refused:
            self._give_up(
                before,
                one,
                attempt=item.attempt,
                dead=DeadLetterReason.PERMANENT_FAILURE,
                reason=FailureReason.LOAD_ROW,
                message=refused,
            )
            return
        org = item.input.get("org_id")
        request = SynthesisRequest(
            function_key=item.function_key,
            prompt=ask.prompt,
            input=ask.input,
            idempotency_key=f"{item.work_item_id}:{step.attempt}",
            org_id=str(org) if org else None,
            max_tokens=self._config.limits.for_model(item.route).max_tokens,
        )
        prompt = prompt_payload(
            function_key=request.function_key,
            prompt=request.prompt,
            input_=request.input,
            idempotency_key=request.idempotency_key,
            org_id=request.org_id,
        )
        before.starts.append(AttemptStart(one.loaded, one.token, step.attempt, prompt))
        before.add_held(one)
        requests[one.item_id] = request

    def _reissue(
        self, before: Writes, one: Held, step: Unknown, requests: dict[UUID, SynthesisRequest]
    ) -> None:
        """The unknown call of ``step.attempt`` is sent again exactly as recorded, under its
        idempotency key, against the attempt's reservation (outcomes.py)."""
        prompt = step.prompt or {}
        item = one.loaded.item
        org = prompt.get("org_id")
        request = SynthesisRequest(
            function_key=str(prompt.get("function_key") or item.function_key),
            prompt=str(prompt.get("prompt", "")),
            input=dict(prompt.get("input") or {}),
            idempotency_key=str(
                prompt.get("idempotency_key") or f"{item.work_item_id}:{step.attempt}"
            ),
            org_id=str(org) if org else None,
            max_tokens=self._config.limits.for_model(item.route).max_tokens,
        )
        record = error_payload(
            kind=FailureKind.OUTCOME_UNKNOWN.value,
            reason=FailureReason.OUTCOME_UNKNOWN.value,
            message=(
                "the outcome of the call is unknown: its worker died or lost the lease before a "
                f"response was recorded; re-issued under its idempotency key "
                f"{request.idempotency_key} (re-issue {step.reissues + 1}), so a gateway that "
                "honours the key answers without billing again"
            ),
            disposition=REISSUE,
            attempt=step.attempt,
        )
        log.warning(
            "re-issuing a call whose outcome is unknown under its idempotency key",
            work_item_id=str(one.item_id),
            attempt=step.attempt,
            reissue=step.reissues + 1,
        )
        self._metrics.reissued.inc()
        before.starts.append(AttemptStart(one.loaded, one.token, step.attempt, prompt, record))
        before.add_held(one)
        requests[one.item_id] = request

    def _call_all(
        self, before: Writes, written: BatchWritten, requests: Mapping[UUID, SynthesisRequest]
    ) -> dict[asyncio.Task[Answer], Held]:
        """Send the paid calls of the attempts that started, all at once."""
        started = [s for s in before.starts if s.loaded.item.work_item_id in written.started]
        if not started:
            return {}
        calls: dict[asyncio.Task[Answer], Held] = {}
        for start in started:
            one = before.held[start.loaded.item.work_item_id]
            reissues = 0
            if start.reissue is not None:
                reissues = 1 + sum(
                    1 for e in one.loaded.entries if e.attempt == start.attempt and is_reissue(e)
                )
            task = asyncio.create_task(
                self._call(one, start.attempt, requests[one.item_id], reissues=reissues)
            )
            calls[task] = one
        return calls

    async def _call(
        self, one: Held, attempt: int, request: SynthesisRequest, *, reissues: int = 0
    ) -> Answer:
        """One paid call; its answer is recorded (journal, then ledger) before it is returned.
        ``reissues``: how often the attempt's call was sent again under its key already. A call
        that times out is re-issued under its key at once when the policy allows and it fits
        the lease (outcomes.py); a failed re-issue keeps its reservation unknown: the first call
        may have been billed."""
        while True:
            answer = await self._call_once(one, attempt, request, reissued=reissues > 0)
            if not isinstance(answer, _TimedOut):
                return answer
            if not await self._reissue_timed_out(one, attempt, request, reissues, answer.seconds):
                failure = classify_call_failure(answer.error)
                return Answer(one, attempt, failure=failure, spend=SpendOutcome.UNKNOWN)
            reissues += 1

    async def _reissue_timed_out(
        self, one: Held, attempt: int, request: SynthesisRequest, reissues: int, seconds: float
    ) -> bool:
        """Record that the call that timed out after ``seconds`` goes out again under its
        idempotency key, within the lease (the record renews it); False when the policy or the
        lease does not allow it, or the item is no longer held at this attempt."""
        if not self._config.unknown_outcomes.reissues_timed_out(
            reissues, seconds, self._config.lease_timeout_seconds
        ):
            return False
        record = error_payload(
            kind=FailureKind.OUTCOME_UNKNOWN.value,
            reason=FailureReason.OUTCOME_UNKNOWN.value,
            message=(
                f"the call timed out after {seconds:.1f} s: its outcome is unknown; re-issued "
                f"within the lease under its idempotency key {request.idempotency_key} "
                f"(re-issue {reissues + 1}), so a gateway that honours the key answers without "
                "billing again"
            ),
            disposition=REISSUE,
            attempt=attempt,
        )
        start = AttemptStart(one.loaded, one.token, attempt, {}, record)
        try:
            written = await self._patiently(
                "record a re-issue", lambda: self._transitions.write(BatchWrite(starts=[start]))
            )
        except Exception as exc:  # noqa: BLE001 - not re-issued: the attempt ends unknown
            log.warning(
                "could not record the re-issue of a call that timed out; its attempt ends with "
                "its outcome unknown",
                work_item_id=str(one.item_id),
                attempt=attempt,
                error=f"{type(exc).__name__}: {exc}",
            )
            return False
        if one.item_id not in written.started:
            return False
        log.warning(
            "re-issuing a call that timed out under its idempotency key, within the lease",
            work_item_id=str(one.item_id),
            attempt=attempt,
            reissue=reissues + 1,
            seconds=round(seconds, 3),
        )
        self._metrics.reissued.inc()
        return True

    async def _call_once(
        self, one: Held, attempt: int, request: SynthesisRequest, *, reissued: bool
    ) -> Answer | _TimedOut:
        """One sending of the call: its answer, or how it timed out (its outcome is unknown)."""
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self._config.call_timeout_seconds):
                response = await self._synthesizer.synthesize(request)
        except UnreadableAnswerError as exc:  # answered, so paid: its bytes are kept
            payload = unreadable_response_payload(
                body=exc.body, model=exc.model, usage=exc.usage, duration_ms=ms_since(started)
            )
            await self._recorder.record(ResponseRecord.of(one.loaded, attempt, payload))
            self._capacity()
            failure = (FailureKind.PERMANENT, FailureReason.SYNTHESIZER, str(exc))
            return Answer(one, attempt, content=None, failure=failure, fresh=True)
        except RateLimitedError as exc:  # no capacity: not done, not charged, not an attempt
            self._metrics.rate_limit(one.loaded.item.route)
            # ADR-0008's reasons stay 8: a 429 is the synthesizer's (work_rate_limited_total
            # counts them apart).
            failure = (FailureKind.RATE_LIMITED, FailureReason.SYNTHESIZER, str(exc))
            return Answer(
                one,
                attempt,
                failure=failure,
                spend=SpendOutcome.UNKNOWN if reissued else SpendOutcome.RELEASED,
                retry_after=exc.retry_after,
            )
        except (TimeoutError, CallTimedOutError) as exc:
            return _TimedOut(time.perf_counter() - started, exc)
        except Exception as exc:  # noqa: BLE001 - classified; unexpected ones are retried
            answered = isinstance(exc, CallRefusedError | RequestRejectedError)
            spend = SpendOutcome.RELEASED if answered and not reissued else SpendOutcome.UNKNOWN
            return Answer(one, attempt, failure=classify_call_failure(exc), spend=spend)
        finally:
            self._metrics.duration.observe(time.perf_counter() - started)
        content, payload = answer_payload(response, ms_since(started))
        if "stopped_at_bound" in payload:
            self._metrics.stream_stopped(one.loaded.item.route)
            log.warning(
                "a streamed answer reached its completion bound: reading stopped there, and it "
                "settles at its reservation",
                work_item_id=str(one.item_id),
                attempt=attempt,
                model=one.loaded.item.route,
                max_tokens=payload["stopped_at_bound"],
            )
        await self._recorder.record(ResponseRecord.of(one.loaded, attempt, payload))
        self._capacity()
        if content is None:
            failure = (FailureKind.PERMANENT, FailureReason.SYNTHESIZER, "the answer is not text")
            return Answer(one, attempt, content=None, failure=failure, fresh=True)
        return Answer(one, attempt, content=content, fresh=True)

    def _capacity(self) -> None:
        if self._on_capacity is not None:
            self._on_capacity()

    async def _write_responses(self, responses: Sequence[ResponseRecord]) -> None:
        """Record paid answers and settle their spend (one transaction), then count it."""
        written = await self._transitions.write(BatchWrite(responses=responses))
        self._spent(written)

    def _spent(self, written: BatchWritten) -> None:
        for one in written.settled:
            self._metrics.spent(one.model, one.function_key, one.org_id, one.tokens, one.cost)
            if one.overrun is not None:
                self._metrics.overran(one.model, one.overrun.tokens, one.overrun.cost)
                log.warning(
                    "provider overrun: billed beyond the call's reservation",
                    work_item_id=str(one.work_item_id),
                    attempt=one.attempt,
                    model=one.model,
                    tokens=one.tokens,
                    overrun_tokens=one.overrun.tokens,
                    overrun_cost=str(one.overrun.cost),
                    ratio=str(round(one.overrun.ratio, 3)),
                )
        for route in written.routes:
            log.warning(
                "model route suspended after a provider overrun: resume it with `spectral work "
                "routes resume`"
                if route.suspended
                else "model route's reservations raised after a provider overrun",
                model=route.model,
                reserve_ratio=str(round(route.reserve_ratio, 3)),
            )

    async def _write_responses_patiently(self, responses: Sequence[ResponseRecord]) -> None:
        await self._patiently("record paid responses", lambda: self._write_responses(responses))

    async def _conclude_as_answered(
        self, run: Run, reused: list[Answer], calls: dict[asyncio.Task[Answer], Held]
    ) -> None:
        """Conclude answers in waves, as they come in: reused ones first (while the calls run),
        then whatever calls finished together since the last wave."""
        ready = reused
        pending = set(calls)
        while ready or pending:
            if ready:
                try:
                    await self._conclude(run, ready)
                except Exception as wave_exc:  # noqa: BLE001 - a bug: these items only
                    run.interrupted([answer.held.job for answer in ready], wave_exc)
                ready = []
            if pending:
                finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in finished:
                    call_exc = task.exception()
                    if call_exc is None:
                        ready.append(task.result())
                    else:  # cannot happen: a call's failures are answers
                        run.interrupted([calls[task].job], call_exc)

    async def _conclude(self, run: Run, answers: Sequence[Answer]) -> None:
        """One wave: validate the answers, then apply, retry or dead-letter — one transaction.
        An answer whose conclusion fails in any way dead-letters its own item."""
        wave = Writes()
        for answer in answers:
            mine = Writes()
            try:
                if answer.failure is not None:
                    self._fail(
                        mine,
                        answer.held,
                        answer.attempt,
                        answer.failure,
                        spend=answer.spend,
                        retry_after=answer.retry_after,
                    )
                else:
                    self._validate(mine, answer)
            except Exception as exc:  # noqa: BLE001 - this item only
                mine = Writes()
                self._give_up(
                    mine,
                    answer.held,
                    attempt=answer.attempt,
                    dead=DeadLetterReason.INVALID_OUTPUT,
                    reason=FailureReason.INVALID_JSON,
                    message=f"the answer could not be validated: {type(exc).__name__}: {exc}",
                )
            wave.merge(mine)
        written = await self._write(run, wave)
        if written.refused:
            await self._refused(run, wave, written.refused)

    def _validate(self, wave: Writes, answer: Answer) -> None:
        one, attempt = answer.held, answer.attempt

        def invalid(message: str, extra: tuple[NewEntry, ...] = ()) -> None:
            self._give_up(
                wave,
                one,
                attempt=attempt,
                dead=DeadLetterReason.INVALID_OUTPUT,
                reason=FailureReason.INVALID_JSON,
                message=message,
                extra=extra,
            )

        if answer.content is None:
            invalid("the paid answer is not readable (its bytes are in the response entry)")
            return
        item = one.loaded.item
        function = self._functions.for_key(item.function_key)
        if function is None:
            invalid(f"no work function {item.function_key!r} is installed to conclude it")
            return
        conclusion = function.conclude(item, answer.content, attempt)
        parse_entry = NewEntry(attempt, EntryType.PARSE_REPORT, conclusion.parse_report)
        if conclusion.mutation is None:
            message = "the answer is not valid: " + "; ".join(conclusion.errors)[:500]
            invalid(message, (parse_entry,))
            return
        wave.applies.append(
            MutationApply(one.loaded, one.token, conclusion.mutation, attempt, parse_entry.payload)
        )
        wave.add_held(one)

    async def _refused(self, run: Run, wave: Writes, refused: Mapping[UUID, str]) -> None:
        """Mutations the document refused: their items are dead-lettered (a transaction of
        their own; nothing was written for them in the wave's)."""
        ends = Writes()
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

    def _fail(
        self,
        writes: Writes,
        one: Held,
        attempt: int,
        failure: Failure,
        *,
        spend: SpendOutcome | None = None,
        retry_after: float | None = None,
    ) -> None:
        """A failed attempt: retry after the backoff, or give up (policy). ``spend``: what the
        attempt's reservation becomes; ``retry_after``: a rate-limited call's wait."""
        kind, reason, message = failure
        self._metrics.failure(reason)
        decision = self._policy.get_retry_decision(attempt, kind, datetime.now(UTC))
        writes.add_held(one)
        if isinstance(decision, RetryDecision):
            error = error_payload(
                kind=kind.value,
                reason=reason.value,
                message=message,
                disposition="retry",
                attempt=attempt,
            )
            wait, pause = self._policy.backoff(attempt), None
            if kind is FailureKind.RATE_LIMITED:
                if retry_after is not None:
                    wait = timedelta(seconds=retry_after)
                route = one.loaded.item.route
                pause = (route, wait.total_seconds()) if route is not None else None
            writes.releases.append(
                RetryRelease(one.loaded, one.token, attempt, error, wait, spend, pause)
            )
            return
        assert isinstance(decision, GiveUp)  # noqa: S101 - the two outcomes of get_retry_decision
        if decision.reason is DeadLetterReason.MAX_ATTEMPTS_EXCEEDED:
            self._metrics.failure(FailureReason.MAX_ATTEMPTS_EXCEEDED)
        dead_letter(
            writes,
            one,
            attempt,
            decision.reason,
            kind=kind,
            reason=reason,
            message=message,
            spend=spend,
        )

    def _give_up(
        self,
        writes: Writes,
        one: Held,
        *,
        attempt: int,
        dead: DeadLetterReason,
        reason: FailureReason,
        message: str,
        extra: tuple[NewEntry, ...] = (),
    ) -> None:
        self._metrics.failure(reason)
        writes.add_held(one)
        dead_letter(
            writes,
            one,
            attempt,
            dead,
            kind=FailureKind.PERMANENT,
            reason=reason,
            message=message,
            extra=extra,
        )

    def _account(self, run: Run, writes: Writes, written: BatchWritten) -> None:
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
        for item_id in sorted(written.canceled):
            log.info("work item canceled", work_item_id=str(item_id))
            self._metrics.canceled.inc()
            run.ended_item(writes.held[item_id], AttemptOutcome.SKIPPED)
        for item_id in sorted(written.requeued):
            run.end(writes.held[item_id].job, AttemptOutcome.SKIPPED)
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
            due = await self._reads.parents_needing_settling(list(parents))
        except Exception as exc:  # noqa: BLE001 - the sweep settles parents left open
            log.warning("settling the parents failed; the sweep will", error=str(exc)[:300])
            return
        await self._settle(due)

    async def _settle(self, parents: Sequence[tuple[UUID, str]]) -> None:
        """Each parent on its own: one that cannot be settled never keeps the others open."""
        for parent_id, project_id in parents:
            try:
                status = await self._parents.settle_parent(parent_id, project_id)
            except Exception as exc:  # noqa: BLE001 - the next sweep tries again
                log.warning(
                    "settling a parent failed; the sweep will try again",
                    thread_id=str(parent_id),
                    error=f"{type(exc).__name__}: {exc}"[:300],
                )
                continue
            if status is not None:
                log.info("orchestration closed", thread_id=str(parent_id), status=status.value)

    # -- the sweep (periodic) ----------------------------------------------------------------------

    async def sweep(self, capacity: int) -> list[Job]:
        """Replay journals of stopped processes, recover stale leases, settle parents left open,
        refresh the queue gauges. Returns the recovered jobs (at most ``capacity``). Stale
        leases are recovered only once every journaled answer is in the ledger: an answer
        waiting in a journal is never taken for an unknown outcome. (Waiting items are claimed
        by the dispatcher, fairly: claims.py.)"""
        journals_replayed = await self._recorder.adopt()
        jobs: list[Job] = []
        if capacity > 0 and journals_replayed:
            token = uuid4()
            recovered = await self._transitions.recover_stale(
                self._config.lease_timeout_seconds,
                capacity,
                token,
                self.worker_id,
                exclude=sorted(self._in_flight),
            )
            if recovered:
                log.warning("recovered stale leases", items=len(recovered))
            jobs.extend((item_id, token) for item_id in recovered)
        await self._settle(await self._reads.parents_to_settle(100))
        self._metrics.oldest_lease_age.set(await self._reads.oldest_lease_age())
        await self._release_unknown()
        calls, tokens = await self._reads.unknown_outcome_spend()
        self._metrics.unknown_outcome_calls.set(calls)
        self._metrics.unknown_outcome_tokens.set(tokens)
        depth = await self._reads.queue_depth()
        self._metrics.observe_queue(
            {status: depth.get(status.value, 0) for status in QueueStatus},
            depth.get(ItemStatus.DEAD_LETTER.value, 0),
        )
        return jobs

    async def _release_unknown(self) -> None:
        """Reservations left unknown past the horizon are released, once (outcomes.py)."""
        released = await self._transitions.release_unknown(
            self._config.unknown_outcomes.horizon_seconds, 1000
        )
        for one in released:
            self._metrics.unknown_released.inc()
            log.warning(
                "released the reservation of a call whose outcome stayed unknown past the horizon",
                work_item_id=str(one.work_item_id),
                attempt=one.attempt,
                model=one.model,
                reserved_tokens=one.tokens,
                reserved_cost=str(one.cost),
            )
