"""The consumer engine's pipeline order rules, without servers: a batch whose predecessor's
transaction failed or was cancelled is never applied, and a batch is never acknowledged (its
offsets committed) after its predecessor's acknowledgement failed — that would skip the failed
batch's records. The happy path and crashes are covered against Kafka and PostgreSQL in
tests/integration/consumer and tests/faults."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from spectral.engine.engine import ConsumerEngine, _Decoded, _InFlight
from spectral.engine.handler import BatchReport, Delivery, Handler, HandlerResult, Outcome
from spectral.settings import Settings


class _Recording(Handler[None]):
    name = "pipeline-test"
    event_types = ("platform.failure_cluster.detected",)

    def __init__(self) -> None:
        self.applied = 0

    async def apply(self, conn: Any, deliveries: Sequence[Delivery]) -> HandlerResult[None]:  # noqa: ARG002
        self.applied += 1
        return HandlerResult()


def _engine(handler: _Recording) -> ConsumerEngine:
    return ConsumerEngine(
        handler,
        Settings(),
        kafka_bootstrap="127.0.0.1:9",
        database_url="postgresql://unused@127.0.0.1:9/unused",
        registry=CollectorRegistry(),
    )


def _empty_batch() -> _Decoded:
    return _Decoded(records=[], deliveries=[], dead=[], seconds=0.0, epoch=0)


def _in_flight(task: asyncio.Task[BatchReport], *, applied: bool | None) -> _InFlight:
    """A predecessor whose transaction committed (True), failed (False) or still runs (None)."""
    future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    if applied is not None:
        future.set_result(applied)
    return _InFlight(future, task)


async def _failing() -> BatchReport:
    raise RuntimeError("batch N failed")


async def _blocked_forever() -> BatchReport:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def _succeeding() -> BatchReport:
    return BatchReport(counts=dict.fromkeys(Outcome, 0), facts={})


def _finish(engine: ConsumerEngine, previous: _InFlight) -> tuple[asyncio.Future[bool], Any]:
    applied: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    return applied, engine._finish(_empty_batch(), previous, applied)


@pytest.mark.asyncio
async def test_a_batch_after_a_failed_transaction_is_not_applied() -> None:
    handler = _Recording()
    engine = _engine(handler)
    previous = _in_flight(asyncio.create_task(_failing()), applied=False)
    applied, finish = _finish(engine, previous)
    with pytest.raises(asyncio.CancelledError):
        await finish
    assert applied.result() is False  # and the batch after it is not applied either
    assert handler.applied == 0
    assert not engine.batch_lock.locked()


@pytest.mark.asyncio
async def test_a_batch_after_a_failed_acknowledgement_is_not_applied() -> None:
    handler = _Recording()
    engine = _engine(handler)
    failed = asyncio.create_task(_failing())
    await asyncio.wait([failed])
    applied, finish = _finish(engine, _in_flight(failed, applied=True))
    with pytest.raises(asyncio.CancelledError):
        await finish
    assert applied.result() is False


@pytest.mark.asyncio
async def test_a_batch_is_not_acknowledged_after_its_predecessor_failed_to_be() -> None:
    engine = _engine(_Recording())
    release = asyncio.Event()

    async def acknowledging_then_failing() -> BatchReport:
        await release.wait()
        raise RuntimeError("offset commit of batch N failed")

    previous = _in_flight(asyncio.create_task(acknowledging_then_failing()), applied=True)
    applied, finish = _finish(engine, previous)
    later = asyncio.create_task(finish)
    assert await applied is True  # its transaction ran beside N's acknowledgement
    assert not later.done()  # its own acknowledgement waits for N's
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await later


@pytest.mark.asyncio
async def test_a_batch_after_a_cancelled_one_is_not_applied() -> None:
    handler = _Recording()
    engine = _engine(handler)
    previous = _in_flight(asyncio.create_task(_blocked_forever()), applied=None)
    applied, finish = _finish(engine, previous)
    later = asyncio.create_task(finish)
    await asyncio.sleep(0)
    assert not later.done()  # it waits for its predecessor's transaction
    previous.task.cancel()
    previous.applied.set_result(False)  # as the cancelled batch's own step reports it
    with pytest.raises(asyncio.CancelledError):
        await later
    assert applied.result() is False
    assert handler.applied == 0


@pytest.mark.asyncio
async def test_a_cancelled_batch_reports_its_transaction_as_not_applied() -> None:
    engine = _engine(_Recording())
    previous = _in_flight(asyncio.create_task(_blocked_forever()), applied=None)
    applied, finish = _finish(engine, previous)
    later = asyncio.create_task(finish)
    await asyncio.sleep(0)
    later.cancel()
    with pytest.raises(asyncio.CancelledError):
        await later
    assert applied.result() is False
    assert not previous.applied.done()  # waiting for it did not cancel the predecessor's step
    previous.task.cancel()


@pytest.mark.asyncio
async def test_a_batch_waits_for_its_predecessor_then_runs() -> None:
    handler = _Recording()
    engine = _engine(handler)
    previous = _in_flight(asyncio.create_task(_succeeding()), applied=True)
    applied, finish = _finish(engine, previous)
    report = await finish
    assert previous.task.done()
    assert applied.result() is True
    assert sum(report.counts.values()) == 0  # an empty batch: nothing to apply
