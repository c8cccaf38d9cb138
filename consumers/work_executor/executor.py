"""One work item, end to end (ADR-035 §7.1 executed per ADR-0008 and ADR-0023).

    lease (claimed)          the conditional claim in the consumer's transaction, or the sweep
    -> prompt + attempt n    one transaction, committed BEFORE the paid call
    -> paid call             synthesizer.synthesize(..., idempotency_key="{item}:{n}")
    -> response              recorded at once, lease or no lease (paid work is never dropped)
    -> parse_report          validate the answer
    -> mutation_report       apply the mutation under the target lock; item applied, thread
                             complete — one transaction
    -> parent settled        under the project lock, in its own transaction (lock order: never
                             the project lock while holding a target lock)

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
from collections.abc import Mapping
from dataclasses import dataclass
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
    ExecutorRepository,
    LeaseLostError,
    LoadedItem,
    NewEntry,
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
from spectral.llm.seam import SynthesisRequest, SynthesisResponse, Synthesizer
from spectral.observability.logging import get_logger
from spectral.work.documents import InvalidDocumentError, ReplaceEpicStories, validate_backlog
from spectral.work.model import EntryType, ItemStatus

log = get_logger(__name__)

_UNKNOWN_OUTCOME = (
    "the outcome of the call is unknown: its worker died or lost the lease before a response "
    "was recorded; the attempt is counted as used"
)

Job = tuple[UUID, UUID]
"""(work_item_id, lease_token) of a claimed item."""


class CrashPoint(StrEnum):
    """Test-only fault hook (tests/faults): where a worker SIGKILLs its own process."""

    AFTER_CLAIM = "after_claim"  # lease held, nothing recorded
    BEFORE_CALL = "before_call"  # prompt and attempt committed, call not sent
    AFTER_RESPONSE = "after_response"  # response recorded, nothing validated or applied
    AFTER_MUTATION = "after_mutation"  # mutation committed, parent not settled


@dataclass(frozen=True)
class ExecutorConfig:
    worker_id: str
    lease_timeout_seconds: float = 300.0
    claim_grace_seconds: float = 5.0
    response_write_patience_seconds: float = 60.0
    crash_at: CrashPoint | None = None


class _PermanentItemError(Exception):
    """The item cannot be executed as asked (missing document or epic): no paid call."""


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

    # -- one item -------------------------------------------------------------------------------

    async def run_item(self, item_id: UUID, token: UUID) -> AttemptOutcome:
        """Drive one claimed item as far as it goes now; returns the attempt outcome."""
        try:
            outcome = await self._run(item_id, token)
        except LeaseLostError:
            log.info("lease lost; leaving the item to its new holder", work_item_id=str(item_id))
            outcome = AttemptOutcome.SKIPPED
        except Exception as exc:  # noqa: BLE001 - any failure leaves the lease to recovery
            # The database failed under us (or a bug): the lease stays, the stale-lease recovery
            # takes the item up again after the timeout and reads what happened from the ledger.
            reason = FailureReason.LOAD_ROW if is_transient(exc) else FailureReason.UNKNOWN
            self._metrics.failure(reason)
            log.warning(
                "work item interrupted; it will be recovered",
                work_item_id=str(item_id),
                error=f"{type(exc).__name__}: {exc}",
            )
            outcome = AttemptOutcome.TRANSIENT_FAILURE
        self._metrics.attempt(outcome)
        return outcome

    async def _run(self, item_id: UUID, token: UUID) -> AttemptOutcome:
        loaded = await self._repo.load(item_id)
        if (
            loaded is None
            or loaded.item.lease_token != token
            or loaded.item.status not in (ItemStatus.CLAIMED, ItemStatus.RUNNING)
        ):
            return AttemptOutcome.SKIPPED
        self._crash_point(CrashPoint.AFTER_CLAIM)
        step = next_step(loaded.item.attempt, loaded.entries, self._policy)
        if isinstance(step, Reuse):
            log.info("reusing a recorded response", work_item_id=str(item_id), attempt=step.attempt)
            return await self._conclude(loaded, token, step.attempt, step.content)
        if isinstance(step, Unknown):
            return await self._fail(
                loaded,
                token,
                attempt=step.attempt,
                kind=FailureKind.OUTCOME_UNKNOWN,
                reason=FailureReason.OUTCOME_UNKNOWN,
                message=_UNKNOWN_OUTCOME,
            )
        if isinstance(step, Exhausted):
            return await self._give_up(
                loaded,
                token,
                attempt=step.attempts,
                dead=DeadLetterReason.MAX_ATTEMPTS_EXCEEDED,
                reason=FailureReason.MAX_ATTEMPTS_EXCEEDED,
                message=f"all {step.attempts} attempts are used",
            )
        return await self._attempt(loaded, token, step)

    async def _attempt(self, loaded: LoadedItem, token: UUID, step: Start) -> AttemptOutcome:
        item = loaded.item
        try:
            request = await self._request(loaded, step.attempt)
        except _PermanentItemError as exc:
            return await self._give_up(
                loaded,
                token,
                attempt=item.attempt,
                dead=DeadLetterReason.PERMANENT_FAILURE,
                reason=FailureReason.LOAD_ROW,
                message=str(exc),
            )
        prompt = {
            "function_key": request.function_key,
            "prompt": request.prompt,
            "input": dict(request.input),
            "idempotency_key": request.idempotency_key,
            "org_id": request.org_id,
        }
        await self._repo.start_attempt(loaded, token, step.attempt, prompt)
        self._crash_point(CrashPoint.BEFORE_CALL)
        started = time.perf_counter()
        try:
            response = await self._synthesizer.synthesize(request)
        except Exception as exc:  # noqa: BLE001 - classified below; unexpected ones are retried
            kind, reason, message = classify_call_failure(exc)
            return await self._fail(
                loaded, token, attempt=step.attempt, kind=kind, reason=reason, message=message
            )
        finally:
            self._metrics.duration.observe(time.perf_counter() - started)
        elapsed_ms = int((time.perf_counter() - started) * 1000)
        await self._record_response(loaded, step.attempt, response, elapsed_ms)
        self._crash_point(CrashPoint.AFTER_RESPONSE)
        return await self._conclude(loaded, token, step.attempt, response.content)

    async def _request(self, loaded: LoadedItem, attempt: int) -> SynthesisRequest:
        item = loaded.item
        document_id = str(item.input.get("document_id", ""))
        epic_id = str(item.input.get("epic_id", ""))
        document = await self._repo.document(document_id)
        if document is None:
            raise _PermanentItemError(f"document {document_id!r} does not exist")
        try:
            backlog = validate_backlog(document.content)
        except InvalidDocumentError as exc:
            raise _PermanentItemError(str(exc)) from exc
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

    async def _record_response(
        self, loaded: LoadedItem, attempt: int, response: SynthesisResponse, elapsed_ms: int
    ) -> None:
        """Write the paid answer, retrying through a database hiccup: it must not be lost."""
        payload: Mapping[str, Any] = {
            "content": response.content,
            "model": response.model,
            "usage": dict(response.usage),
            "duration_ms": elapsed_ms,
        }
        deadline = time.monotonic() + self._config.response_write_patience_seconds
        delay = 0.2
        while True:
            try:
                await self._repo.record_response(loaded, attempt, payload)
            except Exception as exc:
                if not is_transient(exc) or time.monotonic() + delay > deadline:
                    raise
                log.warning(
                    "recording a paid response failed; retrying",
                    work_item_id=str(loaded.item.work_item_id),
                    error=f"{type(exc).__name__}: {exc}",
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            return

    async def _conclude(
        self, loaded: LoadedItem, token: UUID, attempt: int, content: str
    ) -> AttemptOutcome:
        """Validate the answer of ``attempt`` and apply its mutation under the target lock."""
        report = parse_report(content)
        parse_entry = NewEntry(attempt, EntryType.PARSE_REPORT, report.payload(attempt))
        if not report.ok:
            return await self._give_up(
                loaded,
                token,
                attempt=attempt,
                dead=DeadLetterReason.INVALID_OUTPUT,
                reason=FailureReason.INVALID_JSON,
                message="the answer is not valid: " + "; ".join(report.errors)[:500],
                extra=(parse_entry,),
            )
        item = loaded.item
        mutation = ReplaceEpicStories.for_item(
            item.work_item_id,
            str(item.input["document_id"]),
            str(item.input["epic_id"]),
            report.stories,
        )
        try:
            applied = await self._repo.apply(loaded, token, mutation, attempt, parse_entry.payload)
        except (InvalidDocumentError, LookupError) as exc:
            return await self._give_up(
                loaded,
                token,
                attempt=attempt,
                dead=DeadLetterReason.PERMANENT_FAILURE,
                reason=FailureReason.WRITE_MUTATION,
                message=f"the mutation was refused: {exc}",
                extra=(parse_entry,),
            )
        log.info(
            "work item applied",
            work_item_id=str(item.work_item_id),
            attempt=attempt,
            document_version=applied.result_version,
        )
        self._crash_point(CrashPoint.AFTER_MUTATION)
        await self._settle_parent(loaded)
        return AttemptOutcome.SUCCESS

    async def _fail(
        self,
        loaded: LoadedItem,
        token: UUID,
        *,
        attempt: int,
        kind: FailureKind,
        reason: FailureReason,
        message: str,
    ) -> AttemptOutcome:
        self._metrics.failure(reason)
        decision = self._policy.after_failure(attempt, kind, datetime.now(UTC))
        error = {
            "kind": kind.value,
            "reason": reason.value,
            "message": message[:2000],
            "attempt": attempt,
        }
        if isinstance(decision, RetryAt):
            not_before = await self._repo.release_for_retry(
                loaded,
                token,
                attempt,
                {**error, "disposition": "retry"},
                self._policy.backoff(attempt),
            )
            log.info(
                "attempt failed; retry scheduled",
                work_item_id=str(loaded.item.work_item_id),
                attempt=attempt,
                reason=reason.value,
                not_before=not_before.isoformat(),
            )
            return AttemptOutcome.TRANSIENT_FAILURE
        assert isinstance(decision, GiveUp)  # noqa: S101 - the two outcomes of after_failure
        if decision.reason is DeadLetterReason.MAX_ATTEMPTS_EXCEEDED:
            self._metrics.failure(FailureReason.MAX_ATTEMPTS_EXCEEDED)
        await self._dead_letter(loaded, token, attempt=attempt, dead=decision.reason, error=error)
        return AttemptOutcome.PERMANENT_FAILURE

    async def _give_up(
        self,
        loaded: LoadedItem,
        token: UUID,
        *,
        attempt: int,
        dead: DeadLetterReason,
        reason: FailureReason,
        message: str,
        extra: tuple[NewEntry, ...] = (),
    ) -> AttemptOutcome:
        self._metrics.failure(reason)
        error = {
            "kind": FailureKind.PERMANENT.value,
            "reason": reason.value,
            "message": message[:2000],
            "attempt": attempt,
        }
        await self._dead_letter(loaded, token, attempt=attempt, dead=dead, error=error, extra=extra)
        return AttemptOutcome.PERMANENT_FAILURE

    async def _dead_letter(
        self,
        loaded: LoadedItem,
        token: UUID,
        *,
        attempt: int,
        dead: DeadLetterReason,
        error: Mapping[str, Any],
        extra: tuple[NewEntry, ...] = (),
    ) -> None:
        payload = {**error, "disposition": "dead_letter", "dead_letter_reason": dead.value}
        await self._repo.dead_letter(loaded, token, attempt, payload, extra)
        self._metrics.dead_lettered(dead)
        log.warning(
            "work item dead-lettered",
            work_item_id=str(loaded.item.work_item_id),
            attempt=attempt,
            reason=dead.value,
            message=str(error.get("message", ""))[:300],
        )
        await self._settle_parent(loaded)

    async def _settle_parent(self, loaded: LoadedItem) -> None:
        if loaded.parent_thread_id is None:
            return
        try:
            if not await self._repo.parent_needs_settling(loaded.parent_thread_id):
                return  # siblings still run: the last of them settles the parent
            status = await self._repo.settle_parent(loaded.parent_thread_id, loaded.item.project_id)
        except Exception as exc:  # noqa: BLE001 - the sweep settles parents left open
            log.warning("settling the parent failed; the sweep will", error=str(exc))
            return
        if status is not None:
            log.info(
                "orchestration closed",
                thread_id=str(loaded.parent_thread_id),
                status=status.value,
            )

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
        depth = await self._repo.queue_depth()
        self._metrics.observe_queue(
            {status: depth.get(status.value, 0) for status in QueueStatus},
            depth.get(ItemStatus.DEAD_LETTER.value, 0),
        )
        return jobs


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
