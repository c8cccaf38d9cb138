"""Loops that wait out outages: one shape for every one of them (River's ``startstop.Service``).

A :class:`Service` runs its :meth:`~Service.step` again and again — a relay session, a tick of
the cluster service, a claim of the work dispatcher, a sweep — until it is stopped or a step says
it is done, and decides in one place what a failed step means (spectral/faults.py):

* a transient fault (the database or the broker away) is an outage: reported to
  :data:`~spectral.observability.outages.OUTAGES`, which logs its start, a reminder now and
  then and its end (never one line per retry), and the step is retried after a capped
  exponential backoff;
* a configuration error ends the service: no retry can fix the settings;
* any other failure ends it too, unless the service retries those (``retries_any_failure``):
  then it is logged (the first, then at most once a minute with a count) and retried after the
  same backoff.

:meth:`~Service.start` runs the loop as a task, :meth:`~Service.stop` asks it to finish its
step and waits for it (``cancel=True`` interrupts the step instead), :meth:`~Service.stop_soon`
is the signal-safe request, :meth:`~Service.wake` cuts a wait short. A step that lasts (a relay
session) says :meth:`~Service.progressed` once it is under way: the faults before it are over,
as if a step had ended well. :func:`wait_out` is the
same policy for one operation: retry it until it succeeds, through any outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

from spectral.errors import TransientError
from spectral.faults import Fault, classify, component_of, describe
from spectral.observability.logging import get_logger
from spectral.observability.outages import OUTAGES, REMIND_EVERY, Outages
from spectral.retry import Backoff

log = get_logger(__name__)

T = TypeVar("T")

ATTEMPTS_WHILE_STOPPING: Final = 3
"""Retries :func:`wait_out` still makes once its caller was asked to stop."""


async def wait_out(
    component: str,
    operation: Callable[[], Awaitable[T]],
    *,
    backoff: Backoff,
    outages: Outages = OUTAGES,
    stopping: asyncio.Event | None = None,
    on_retry: Callable[[str], None] | None = None,
    what: str = "",
) -> T:
    """``await operation()`` until it succeeds, pausing with ``backoff`` after each transient
    fault of ``component`` (reported to ``outages``; ``on_retry`` gets the fault's component,
    e.g. ``database_lock`` for a lock wait); anything else is raised at once. Once ``stopping``
    is set, a fault is given up after :data:`ATTEMPTS_WHILE_STOPPING` more tries
    (``TransientError``). Cancellation interrupts the wait."""
    attempt = 0
    failed: str | None = None
    while True:
        try:
            result = await operation()
        except Exception as exc:
            if classify(exc) is not Fault.TRANSIENT:
                raise
            attempt += 1
            failed = component_of(exc, component) or component
            if stopping is not None and stopping.is_set() and attempt > ATTEMPTS_WHILE_STOPPING:
                raise TransientError(f"{component} unavailable while stopping: {exc}") from exc
            if on_retry is not None:
                on_retry(failed)
            outages.failed(failed, exc, what=what)
            await asyncio.sleep(backoff.delay(attempt))
        else:
            if failed is not None:
                outages.recovered(failed)
            return result


class Service(ABC):
    """A supervised loop (see the module docstring). Subclasses write :meth:`step`."""

    name: str = "service"
    """Names the service in its log lines (and its task)."""
    component: str | None = None
    """The server a transient fault is blamed on when the fault itself does not say."""
    retries_any_failure: bool = False
    """Retry a step that failed for another reason than an outage (logged), instead of ending."""

    def __init__(
        self,
        *,
        backoff: Backoff,
        outages: Outages = OUTAGES,
        give_up_after: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backoff = backoff
        self.outages = outages
        self.give_up_after = give_up_after
        """Faults in a row after which the loop raises the last one (None: never)."""
        self._clock = clock
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._logged_at: float | None = None
        self._unlogged = 0
        self._failures = 0
        """Faults in a row (the backoff grows with them)."""
        self._faulted: str | None = None
        """The component of the outage the last fault belongs to, until a step succeeds."""

    @abstractmethod
    async def step(self) -> float | None:
        """One round of the service's work; the seconds to wait before the next (0: at once;
        :meth:`wake` cuts the wait short), or None when the service is done."""

    def faulted(self, exc: BaseException, component: str | None) -> None:  # noqa: B027 - a hook
        """Called for every failed step before the backoff (counters go here)."""

    # -- lifecycle --------------------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def start(self) -> asyncio.Task[None]:
        """Run the loop as a task (once; a second start returns the running task)."""
        if self._task is None or self._task.done():
            self._stop.clear()
            self._task = asyncio.create_task(self.run(), name=self.name)
        return self._task

    def stop_soon(self) -> None:
        """Ask the loop to end after the step in flight (safe from a signal handler)."""
        self._stop.set()
        self._wake.set()

    async def stop(self, *, cancel: bool = False, patience: float | None = None) -> None:
        """Stop the loop started by :meth:`start` and wait for it: the step in flight finishes
        (within ``patience`` seconds, then it is cancelled); ``cancel`` interrupts it at once."""
        self.stop_soon()
        task, self._task = self._task, None
        if task is None:
            return
        if cancel:
            task.cancel()
        done, _ = await asyncio.wait({task}, timeout=patience)
        if not done:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def progressed(self) -> None:
        """The step in flight is under way (a step that lasts, such as a relay session): the
        faults before it are over — their outage ends, and the next fault backs off from the
        first delay again, as after a step that ended well."""
        if self._faulted is not None:
            self.outages.recovered(self._faulted)
        self._failures, self._faulted = 0, None

    def wake(self) -> None:
        """Cut the current wait short: step again at once."""
        self._wake.set()

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``, or until woken or stopped."""
        if seconds <= 0 or self._stop.is_set():
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=seconds)

    # -- the loop ---------------------------------------------------------------------------------

    async def run_until(self, stop: asyncio.Event) -> None:
        """:meth:`run`, asked to stop (after its step) once ``stop`` is set."""

        async def forward() -> None:
            await stop.wait()
            self.stop_soon()

        watcher = asyncio.create_task(forward(), name=f"{self.name}-stop")
        try:
            await self.run()
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def run(self) -> None:
        """Step until stopped or done; faults as the module docstring says."""
        self._failures, self._faulted = 0, None
        while not self._stop.is_set():
            self._wake.clear()
            try:
                wait = await self.step()
            except Exception as exc:  # noqa: BLE001 - classified in _failed (raised when fatal)
                self._failures += 1
                self._faulted = self._failed(exc, self._failures)
                wait = self.backoff.delay(self._failures)
            else:
                self.progressed()
                if wait is None:
                    return
            await self.sleep(wait)

    def _failed(self, exc: BaseException, failures: int) -> str | None:
        """Report a failed step; raise it when the loop should end. Returns the component of
        an outage it belongs to."""
        fault = classify(exc)
        component = component_of(exc, self.component) if fault is Fault.TRANSIENT else None
        self.faulted(exc, component)
        if fault is Fault.CONFIGURATION or (
            fault is not Fault.TRANSIENT and not self.retries_any_failure
        ):
            raise exc
        if self.give_up_after is not None and failures > self.give_up_after:
            raise exc
        if component is not None:
            self.outages.failed(component, exc, what=self.name)
            return component
        now = self._clock()
        if self._logged_at is None or now - self._logged_at >= REMIND_EVERY:
            log.warning(
                "step failed; retrying",
                service=self.name,
                error=describe(exc, 500),
                failures_since_last_line=self._unlogged + 1,
                retry_in=self.backoff.delay(failures),
            )
            self._logged_at, self._unlogged = now, 0
        else:
            self._unlogged += 1
        return None


class Supervised(Service):
    """A service whose step is the given ``step`` (instead of a subclass's method)."""

    def __init__(
        self,
        name: str,
        step: Callable[[], Awaitable[float | None]],
        *,
        backoff: Backoff,
        component: str | None = None,
        retries_any_failure: bool = False,
        give_up_after: int | None = None,
        on_fault: Callable[[BaseException, str | None], None] | None = None,
        outages: Outages = OUTAGES,
    ) -> None:
        super().__init__(backoff=backoff, outages=outages, give_up_after=give_up_after)
        self.name = name
        self.component = component
        self.retries_any_failure = retries_any_failure
        self._step = step
        self._on_fault = on_fault

    async def step(self) -> float | None:
        return await self._step()

    def faulted(self, exc: BaseException, component: str | None) -> None:
        if self._on_fault is not None:
            self._on_fault(exc, component)


class Periodic(Supervised):
    """A service whose step is one call of ``work`` every ``every`` seconds; any failure is
    retried (an outage waited out, anything else logged) — only a configuration error ends it."""

    def __init__(
        self,
        name: str,
        work: Callable[[], Awaitable[object]],
        *,
        every: float,
        backoff: Backoff,
        component: str | None = None,
        outages: Outages = OUTAGES,
    ) -> None:
        async def step() -> float:
            await work()
            return every

        super().__init__(
            name,
            step,
            backoff=backoff,
            component=component,
            retries_any_failure=True,
            outages=outages,
        )
