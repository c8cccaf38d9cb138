"""The one supervised-loop shape: an outage is waited out and logged as one outage, wrong
settings end the loop, anything else ends it or is retried (logged at most once a minute),
and stop/wake/give-up behave the same for every service built on it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, MutableMapping
from typing import Any

import asyncpg
import pytest
import structlog

from spectral.errors import ConfigurationError, TransientError
from spectral.observability.outages import Outages
from spectral.retry import Backoff
from spectral.service import ATTEMPTS_WHILE_STOPPING, Periodic, Service, Supervised, wait_out

FAST = Backoff(base=0.001, cap=0.002)


@pytest.fixture
def captured() -> Iterator[list[MutableMapping[str, Any]]]:
    with structlog.testing.capture_logs() as logs:
        yield logs


def _events(captured: list[MutableMapping[str, Any]]) -> list[str]:
    return [line["event"] for line in captured]


async def test_wait_out_retries_an_outage_and_logs_it_once(
    captured: list[MutableMapping[str, Any]],
) -> None:
    faults: list[BaseException] = [ConnectionRefusedError()] * 50
    retried: list[str] = []

    async def operation() -> str:
        if faults:
            raise faults.pop()
        return "done"

    outages = Outages()
    result = await wait_out(
        "database", operation, backoff=FAST, outages=outages, on_retry=retried.append
    )
    assert result == "done"
    assert retried == ["database"] * 50
    assert _events(captured) == [
        "outage started: waiting for the server",
        "outage ended: the server answers again",
    ]


async def test_wait_out_counts_a_lock_wait_apart() -> None:
    faults: list[BaseException] = [
        ConnectionRefusedError(),
        asyncpg.exceptions.LockNotAvailableError("lock timeout"),
    ]
    retried: list[str] = []

    async def operation() -> None:
        if faults:
            raise faults.pop()

    await wait_out("database", operation, backoff=FAST, outages=Outages(), on_retry=retried.append)
    assert retried == ["database_lock", "database"]


async def test_wait_out_raises_what_is_not_an_outage_at_once() -> None:
    calls = 0

    async def operation() -> None:
        nonlocal calls
        calls += 1
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        await wait_out("database", operation, backoff=FAST, outages=Outages())
    assert calls == 1


async def test_wait_out_gives_up_soon_once_asked_to_stop() -> None:
    stopping = asyncio.Event()
    stopping.set()
    calls = 0

    async def operation() -> None:
        nonlocal calls
        calls += 1
        raise ConnectionRefusedError

    with pytest.raises(TransientError, match="unavailable while stopping"):
        await wait_out("kafka", operation, backoff=FAST, outages=Outages(), stopping=stopping)
    assert calls == ATTEMPTS_WHILE_STOPPING + 1


class Scripted(Service):
    """Steps through ``script``: an exception is raised, a float or None returned."""

    name = "scripted"

    def __init__(self, script: list[Any], **kwargs: Any) -> None:
        super().__init__(backoff=FAST, outages=Outages(), **kwargs)
        self.script = script
        self.steps = 0
        self.faults: list[tuple[str, str | None]] = []

    async def step(self) -> float | None:
        self.steps += 1
        item = self.script.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item  # type: ignore[no-any-return]

    def faulted(self, exc: BaseException, component: str | None) -> None:
        self.faults.append((type(exc).__name__, component))


async def test_a_service_waits_out_outages_until_its_step_says_done(
    captured: list[MutableMapping[str, Any]],
) -> None:
    service = Scripted([0.0, OSError("refused"), OSError("refused"), 0.0, None])
    await service.run()
    assert service.steps == 5
    assert service.faults == [("OSError", None), ("OSError", None)]  # no component given
    assert _events(captured) == ["step failed; retrying"]  # not an outage of a known server
    service = Scripted([KafkaTimeoutError(), KafkaTimeoutError(), None])
    captured.clear()
    await service.run()
    assert _events(captured) == [
        "outage started: waiting for the server",
        "outage ended: the server answers again",
    ]


class KafkaTimeoutError(TransientError):
    component = "kafka"


async def test_wrong_settings_end_a_service() -> None:
    service = Scripted([ConfigurationError("fix SPECTRAL_DATABASE_URL"), None])
    with pytest.raises(ConfigurationError):
        await service.run()
    assert service.steps == 1


async def test_a_failure_that_is_no_outage_ends_a_service_unless_it_retries_any() -> None:
    with pytest.raises(ValueError, match="a bug"):
        await Scripted([ValueError("a bug"), None]).run()
    lenient = Scripted([ValueError("a bug"), None])
    lenient.retries_any_failure = True
    await lenient.run()
    assert lenient.steps == 2


async def test_failures_that_are_no_outage_are_logged_at_most_once_a_minute(
    captured: list[MutableMapping[str, Any]],
) -> None:
    service = Scripted([ValueError(str(n)) for n in range(30)] + [None])
    service.retries_any_failure = True
    await service.run()
    assert _events(captured) == ["step failed; retrying"]


async def test_a_service_gives_up_after_so_many_faults_in_a_row() -> None:
    service = Scripted([KafkaTimeoutError()] * 10, give_up_after=3)
    with pytest.raises(KafkaTimeoutError):
        await service.run()
    assert service.steps == 4


async def test_a_step_that_lasts_ends_the_faults_before_it_once_it_progressed(
    captured: list[MutableMapping[str, Any]],
) -> None:
    """A long step (a relay session) that got going: the next fault backs off from the first
    delay and counts as the first in a row, and the outage before it ended."""
    waits: list[float] = []

    class Sessions(Scripted):
        async def step(self) -> float | None:
            if self.steps == 2:  # the third session gets going, then faults
                self.progressed()
            return await super().step()

        async def sleep(self, seconds: float) -> None:
            waits.append(seconds)

    service = Sessions(
        [KafkaTimeoutError(), KafkaTimeoutError(), KafkaTimeoutError(), KafkaTimeoutError(), None],
        give_up_after=3,
    )
    service.backoff = Backoff(base=1.0, cap=60.0)
    await service.run()
    assert waits == [1.0, 2.0, 1.0, 2.0]
    assert _events(captured) == [
        "outage started: waiting for the server",
        "outage ended: the server answers again",
        "outage started: waiting for the server",
        "outage ended: the server answers again",
    ]


async def test_stop_lets_the_step_finish_and_wake_cuts_a_wait_short() -> None:
    entered = asyncio.Event()
    release = asyncio.Event()
    finished: list[str] = []

    async def step() -> float:
        entered.set()
        await release.wait()
        finished.append("step")
        return 3600.0

    service = Supervised("long", step, backoff=FAST, outages=Outages())
    service.start()
    await entered.wait()
    stopping = asyncio.create_task(service.stop())
    await asyncio.sleep(0.01)
    assert not stopping.done()  # waits for the step in flight
    release.set()
    await asyncio.wait_for(stopping, 5)
    assert finished == ["step"]

    ticks: list[int] = []

    async def tick() -> None:
        ticks.append(len(ticks))

    periodic = Periodic("hourly", tick, every=3600, backoff=FAST, outages=Outages())
    periodic.start()
    await asyncio.sleep(0.01)
    periodic.wake()
    await asyncio.sleep(0.01)
    assert ticks == [0, 1]
    await asyncio.wait_for(periodic.stop(), 5)


async def test_stop_with_cancel_interrupts_the_step_and_a_patience_bounds_the_wait() -> None:
    async def forever() -> float:
        await asyncio.Event().wait()
        return 0.0

    service = Supervised("stuck", forever, backoff=FAST, outages=Outages())
    service.start()
    await asyncio.sleep(0.01)
    await asyncio.wait_for(service.stop(patience=0.05), 5)
    service.start()
    await asyncio.sleep(0.01)
    await asyncio.wait_for(service.stop(cancel=True), 5)


async def test_run_until_an_outside_event() -> None:
    stop = asyncio.Event()
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        ticks += 1
        if ticks == 3:
            stop.set()

    await asyncio.wait_for(
        Periodic("ticker", tick, every=0.001, backoff=FAST, outages=Outages()).run_until(stop), 5
    )
    assert ticks == 3
