"""A bounded pool of workers over claimed items (ADR-0008: fixed size per process).

At most ``size`` items execute at once and at most ``size`` more wait in the queue; ``submit``
waits for room, which throttles the consumer that claims items (backpressure). A claimed item
waiting here holds a lease that ages; if it outlives the lease timeout another worker re-claims
it and this one's guarded writes find the lease gone and stop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from uuid import UUID

from spectral.observability.logging import get_logger

log = get_logger(__name__)

Job = tuple[UUID, UUID]


class WorkerPool:
    def __init__(self, size: int, run: Callable[[UUID, UUID], Awaitable[object]]) -> None:
        if size < 1:
            raise ValueError("a pool needs at least one worker")
        self._size = size
        self._run = run
        self._queue: asyncio.Queue[Job] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._busy = 0

    @property
    def free(self) -> int:
        """How many more jobs can be taken without waiting."""
        queued = self._queue.qsize() if self._queue is not None else 0
        return max(self._size - self._busy - queued, 0)

    def _ensure_started(self) -> asyncio.Queue[Job]:
        if self._queue is None:
            self._queue = asyncio.Queue(maxsize=self._size)
            self._tasks = [
                asyncio.create_task(self._worker(), name=f"work-executor-{n}")
                for n in range(self._size)
            ]
        return self._queue

    async def submit(self, jobs: Iterable[Job]) -> None:
        queue = self._ensure_started()
        for job in jobs:
            await queue.put(job)

    async def join(self) -> None:
        """Wait until every submitted job has finished."""
        if self._queue is not None:
            await self._queue.join()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        self._queue = None

    async def _worker(self) -> None:
        assert self._queue is not None  # noqa: S101 - started before any worker
        queue = self._queue
        while True:
            item_id, token = await queue.get()
            self._busy += 1
            try:
                await self._run(item_id, token)
            except Exception:  # one item never stops the pool (its lease stays)
                with contextlib.suppress(Exception):  # not even a broken log stream
                    log.exception("work item crashed its worker", work_item_id=str(item_id))
            finally:
                self._busy -= 1
                queue.task_done()
