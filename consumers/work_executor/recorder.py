"""Recording paid answers: the journal first, then the ledger — nothing paid is ever dropped.

``ResponseRecorder.record`` returns once an answer is in the ledger (or, refused by the
database for a reason that is not an outage, kept in the journal's rejected file). On the way:

1. the answer is appended to the local response journal and fsync'd (journal.py) — from then on
   it survives a crash, a restart and a database outage of any length;
2. it is written to the ledger, waiting out any outage (patience.py);
3. its journal record is settled (a journal file with nothing unsettled is deleted).

Both steps are group commits: answers that arrive while a step is busy go together in its next
round (one fsync, one statement), and none waits for a call still running. A failure of the
journal's disk is logged and counted, and the answer goes on to the ledger (it is then only as
safe as memory until the ledger has it). ``adopt`` replays the journal files of dead processes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from consumers.work_executor.journal import ResponseJournal, Ticket
from consumers.work_executor.metrics import ExecutorMetrics, JournalEvent
from consumers.work_executor.patience import is_data_error
from consumers.work_executor.transitions import ResponseRecord
from spectral.observability.logging import get_logger

log = get_logger(__name__)

T = TypeVar("T")
R = TypeVar("R")

WriteResponses = Callable[[Sequence[ResponseRecord]], Awaitable[None]]


class GroupCommit(Generic[T, R]):
    """Items submitted while a flush runs go together in the next one; one flush at a time."""

    def __init__(self, flush: Callable[[list[T]], Awaitable[R]], name: str) -> None:
        self._flush = flush
        self._name = name
        self._waiting: list[tuple[T, asyncio.Future[R]]] = []
        self._task: asyncio.Task[None] | None = None

    async def submit(self, item: T) -> R:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, future))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain(), name=self._name)
        return await future

    async def _drain(self) -> None:
        await asyncio.sleep(0)  # what arrives on the same turn of the loop joins
        while self._waiting:
            group, self._waiting = self._waiting, []
            try:
                result = await self._flush([item for item, _ in group])
            except asyncio.CancelledError:  # closing: nobody waits in vain
                for _, future in group:
                    future.cancel()
                raise
            except Exception as exc:  # noqa: BLE001 - handed to the submitters
                for _, future in group:
                    if not future.done():
                        future.set_exception(exc)
            else:
                for _, future in group:
                    if not future.done():
                        future.set_result(result)

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        for _, future in self._waiting:
            future.cancel()
        self._waiting.clear()


class ResponseRecorder:
    def __init__(
        self,
        journal: ResponseJournal | None,
        write: WriteResponses,
        patient_write: WriteResponses,
        metrics: ExecutorMetrics,
    ) -> None:
        self._journal = journal
        self._write = write
        self._patient_write = patient_write
        self._metrics = metrics
        self._to_journal: GroupCommit[ResponseRecord, Ticket] = GroupCommit(
            self._append, "work-journal"
        )
        self._to_ledger: GroupCommit[ResponseRecord, None] = GroupCommit(
            self._record_patiently, "work-responses"
        )

    async def record(self, response: ResponseRecord) -> None:
        ticket: Ticket | None = None
        if self._journal is not None:
            try:
                ticket = await self._to_journal.submit(response)
            except Exception as exc:  # noqa: BLE001 - the ledger write below still keeps it
                self._metrics.journal(JournalEvent.APPEND_FAILED)
                log.error(  # noqa: TRY400 - the error text says it all; no traceback needed
                    "the response journal could not take a paid answer; recording it in the "
                    "ledger only",
                    work_item_id=str(response.work_item_id),
                    error=f"{type(exc).__name__}: {exc}"[:300],
                )
        await self._to_ledger.submit(response)
        if ticket is not None and self._journal is not None:
            self._journal.settle(ticket, 1)

    async def adopt(self) -> bool:
        """Record the answers of dead processes' journal files in the ledger; True when none
        is left (a file whose answers could not be recorded now stays for the next time)."""
        if self._journal is None:
            return True
        journal = self._journal
        complete = True
        for orphan in await asyncio.to_thread(journal.orphans):
            try:
                if orphan.records:
                    await self._record(orphan.records, patient=False)
            except Exception as exc:  # noqa: BLE001 - an outage: the file waits for next time
                journal.release(orphan)
                complete = False
                log.warning(
                    "replaying a response journal failed; it stays for the next sweep",
                    path=str(orphan.path),
                    error=f"{type(exc).__name__}: {exc}"[:300],
                )
                continue
            journal.discard(orphan)
            self._metrics.journal(JournalEvent.REPLAYED, len(orphan.records))
            log.warning(
                "replayed a response journal left by a process that stopped",
                path=str(orphan.path),
                responses=len(orphan.records),
                unreadable_lines=orphan.skipped,
            )
        return complete

    async def aclose(self) -> None:
        await self._to_journal.aclose()
        await self._to_ledger.aclose()
        if self._journal is not None:
            self._journal.close()

    # -- the two steps ----------------------------------------------------------------------------

    async def _append(self, records: list[ResponseRecord]) -> Ticket:
        assert self._journal is not None  # noqa: S101 - submitted only with a journal
        ticket = await self._journal.append_async(records)
        self._metrics.journal(JournalEvent.APPENDED, len(records))
        return ticket

    async def _record_patiently(self, records: list[ResponseRecord]) -> None:
        await self._record(records, patient=True)

    async def _record(self, records: Sequence[ResponseRecord], *, patient: bool) -> None:
        """Write ``records`` to the ledger; one the database refuses for its data (all
        together first, then one by one) is rejected, never lost and never retried forever.
        Outages are waited out when ``patient``; they, and every failure that is not about the
        data (a read-only session, a missing privilege), are raised: the records stay in the
        journal for a later replay."""
        write = self._patient_write if patient else self._write
        try:
            await write(records)
        except Exception as exc:
            if not is_data_error(exc):
                raise
            if len(records) == 1:
                await self._reject(records, exc)
                return
            log.warning(
                "recording paid responses together failed; recording them one by one",
                responses=len(records),
                error=f"{type(exc).__name__}: {exc}"[:300],
            )
            for one in records:
                try:
                    await write([one])
                except Exception as one_exc:
                    if not is_data_error(one_exc):
                        raise
                    await self._reject([one], one_exc)

    async def _reject(self, records: Sequence[ResponseRecord], exc: Exception) -> None:
        self._metrics.journal(JournalEvent.REJECTED, len(records))
        reason = f"{type(exc).__name__}: {exc}"
        if self._journal is not None:
            await asyncio.to_thread(self._journal.reject, records, reason)
        else:
            log.error(
                "paid responses refused by the database (no response journal to keep them)",
                work_item_ids=[str(r.work_item_id) for r in records],
                reason=reason[:500],
            )
