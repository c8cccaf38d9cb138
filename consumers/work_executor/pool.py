"""A bounded pool over claimed items, run in batches (ADR-0008: fixed size per process).

At most ``size`` items are in flight at once (each has its paid call running, or about to, or
is being concluded) and at most ``size`` more wait in the queue; ``submit`` waits for room,
which throttles the consumer that claims items (backpressure). Whenever there is room, the
items waiting go out together as one batch (at most ``batch_size``, at most the room there
is), so a batch never starts an attempt it cannot call at once. An item's room is given back
as soon as the batch reports the item finished, not when the whole batch is. A claimed item
waiting here holds a lease that ages; if it outlives the lease timeout another worker
re-claims it and this one's guarded writes find the lease gone and stop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from uuid import UUID

from spectral.observability.logging import get_logger

log = get_logger(__name__)

Job = tuple[UUID, UUID]
"""(work_item_id, lease_token) of a claimed item."""

JobDone = Callable[[Job], None]
"""Told when a job of a batch is finished (its item's last write of this run committed)."""

RunBatch = Callable[[Sequence[Job], JobDone], Awaitable[object]]


class WorkerPool:
    def __init__(
        self,
        size: int,
        run: RunBatch,
        batch_size: int | None = None,
        on_room: Callable[[], None] | None = None,
    ) -> None:
        if size < 1:
            raise ValueError("a pool needs at least one worker")
        if batch_size is not None and batch_size < 1:
            raise ValueError("a batch holds at least one item")
        self._size = size
        self._batch_size = min(batch_size or size, size)
        self._run = run
        self._queue: asyncio.Queue[Job] | None = None
        self._dispatcher: asyncio.Task[None] | None = None
        self._batches: set[asyncio.Task[None]] = set()
        self._busy = 0
        self._room = asyncio.Event()
        self._on_room = on_room

    @property
    def free(self) -> int:
        """How many more jobs can be taken without waiting."""
        queued = self._queue.qsize() if self._queue is not None else 0
        return max(self._size - self._busy - queued, 0)

    def _ensure_started(self) -> asyncio.Queue[Job]:
        if self._queue is None:
            self._queue = asyncio.Queue(maxsize=self._size)
            self._dispatcher = asyncio.create_task(self._dispatch(), name="work-executor")
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
        tasks = [*self._batches, *([self._dispatcher] if self._dispatcher else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._batches.clear()
        self._dispatcher = None
        self._queue = None
        self._busy = 0

    async def _dispatch(self) -> None:
        assert self._queue is not None  # noqa: S101 - started before the dispatcher
        queue = self._queue
        while True:
            while self._busy >= self._size:
                self._room.clear()
                await self._room.wait()
            batch = [await queue.get()]
            room = min(self._size - self._busy, self._batch_size)
            while len(batch) < room and not queue.empty():
                batch.append(queue.get_nowait())
            self._busy += len(batch)
            task = asyncio.create_task(self._run_batch(batch), name="work-executor-batch")
            self._batches.add(task)
            task.add_done_callback(self._batches.discard)

    async def _run_batch(self, batch: list[Job]) -> None:
        assert self._queue is not None  # noqa: S101 - started before any batch
        queue = self._queue
        left = list(batch)

        def done(job: Job) -> None:
            if job in left:
                left.remove(job)
                self._give_back(queue)

        try:
            await self._run(batch, done)
        except Exception:  # one batch never stops the pool (its leases stay)
            with contextlib.suppress(Exception):  # not even a broken log stream
                log.exception(
                    "a batch of work items crashed", work_item_ids=[str(i) for i, _ in batch]
                )
        finally:
            for _ in range(len(left)):
                self._give_back(queue)
            left.clear()

    @property
    def batch_size(self) -> int:
        return self._batch_size

    def _give_back(self, queue: asyncio.Queue[Job]) -> None:
        self._busy -= 1
        queue.task_done()
        self._room.set()
        if self._on_room is not None:
            self._on_room()
