"""Test-only fault hooks (tests/faults): where an executor SIGKILLs its own process.

Set by ``SPECTRAL_WORK_CRASH_AT`` (deployment.py, ``ExecutorFaultHooks``), they wrap the
executor's ports — its reads, its transitions, its synthesizer — and never appear in its batch
flow: a killing port is the only difference between a faulted executor and a normal one.

* ``after_claim``: leases held, nothing recorded (the batch's first read);
* ``before_call``: prompts and attempts committed, calls not sent (the first call);
* ``before_settlement``: answers journaled, neither in the ledger nor settled (a response
  write, before it runs);
* ``after_response``: responses recorded, nothing validated or applied (a response write,
  once committed);
* ``after_mutation``: mutations committed, parents not settled (a write that applied some).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from enum import StrEnum
from uuid import UUID

import asyncpg

from consumers.work_executor.overruns import OverrunPolicy
from consumers.work_executor.parents import ParentSettlement
from consumers.work_executor.reads import ExecutorReads, LoadedBatch
from consumers.work_executor.store import Store
from consumers.work_executor.transitions import BatchWrite, BatchWritten, Transitions
from producers.work.domain.functions import Functions
from spectral.llm.seam import SynthesisRequest, SynthesisResponse, Synthesizer
from spectral.observability.logging import get_logger

log = get_logger(__name__)


class CrashPoint(StrEnum):
    AFTER_CLAIM = "after_claim"
    BEFORE_CALL = "before_call"
    AFTER_RESPONSE = "after_response"
    AFTER_MUTATION = "after_mutation"
    BEFORE_SETTLEMENT = "before_settlement"


def _kill(point: CrashPoint) -> None:
    log.warning("fault hook: SIGKILL", point=point.value)
    os.kill(os.getpid(), signal.SIGKILL)


class _KillingReads(ExecutorReads):
    def __init__(self, pool: asyncpg.Pool, point: CrashPoint) -> None:
        super().__init__(pool)
        self._point = point

    async def load_batch(self, item_ids: Sequence[UUID]) -> LoadedBatch:
        if self._point is CrashPoint.AFTER_CLAIM:
            _kill(self._point)
        return await super().load_batch(item_ids)


class _KillingTransitions(Transitions):
    def __init__(
        self,
        pool: asyncpg.Pool,
        functions: Functions,
        point: CrashPoint,
        overruns: OverrunPolicy | None = None,
    ) -> None:
        super().__init__(pool, functions, overruns)
        self._point = point

    async def write(self, batch: BatchWrite) -> BatchWritten:
        if self._point is CrashPoint.BEFORE_SETTLEMENT and batch.responses:
            _kill(self._point)
        written = await super().write(batch)
        if self._point is CrashPoint.AFTER_RESPONSE and batch.responses:
            _kill(self._point)
        if self._point is CrashPoint.AFTER_MUTATION and written.applied:
            _kill(self._point)
        return written


class _KillingSynthesizer:
    def __init__(self, synthesizer: Synthesizer) -> None:
        self._synthesizer = synthesizer

    async def synthesize(self, request: SynthesisRequest) -> SynthesisResponse:
        _kill(CrashPoint.BEFORE_CALL)
        return await self._synthesizer.synthesize(request)

    async def aclose(self) -> None:
        closer = getattr(self._synthesizer, "aclose", None)
        if closer is not None:
            await closer()


def crashing_store(
    point: CrashPoint,
    pool: asyncpg.Pool,
    functions: Functions,
    overruns: OverrunPolicy | None = None,
) -> Store:
    """The executor's store, killing the process at ``point``."""
    return Store(
        _KillingReads(pool, point),
        _KillingTransitions(pool, functions, point, overruns),
        ParentSettlement(pool),
    )


def crashing_synthesizer(point: CrashPoint, synthesizer: Synthesizer) -> Synthesizer:
    """``synthesizer``, killing the process before its first call at ``before_call``."""
    return _KillingSynthesizer(synthesizer) if point is CrashPoint.BEFORE_CALL else synthesizer
