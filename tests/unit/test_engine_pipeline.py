"""The consumer engine's pipeline order rule, without servers: a batch whose predecessor
failed or was cancelled is never applied (committing its offsets would skip the failed
batch's records). The happy path and crashes are covered against Kafka and PostgreSQL in
tests/integration/consumer and tests/faults."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from spectral.consumer.engine import ConsumerEngine, _Decoded
from spectral.consumer.handler import BatchReport, Delivery, Handler, HandlerResult, Outcome
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


async def _failing() -> BatchReport:
    raise RuntimeError("batch N failed")


async def _blocked_forever() -> BatchReport:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def _succeeding() -> BatchReport:
    return BatchReport(counts=dict.fromkeys(Outcome, 0), facts={})


@pytest.mark.asyncio
async def test_a_batch_after_a_failed_one_is_not_applied() -> None:
    handler = _Recording()
    engine = _engine(handler)
    previous = asyncio.create_task(_failing())
    with pytest.raises(asyncio.CancelledError):
        await engine._finish(_empty_batch(), previous)
    assert handler.applied == 0
    assert not engine.batch_lock.locked()


@pytest.mark.asyncio
async def test_a_batch_after_a_cancelled_one_is_not_applied() -> None:
    handler = _Recording()
    engine = _engine(handler)
    previous = asyncio.create_task(_blocked_forever())
    later = asyncio.create_task(engine._finish(_empty_batch(), previous))
    await asyncio.sleep(0)
    assert not later.done()  # it waits for its predecessor
    previous.cancel()
    with pytest.raises(asyncio.CancelledError):
        await later
    assert handler.applied == 0


@pytest.mark.asyncio
async def test_a_batch_waits_for_its_predecessor_then_runs() -> None:
    handler = _Recording()
    engine = _engine(handler)
    previous = asyncio.create_task(_succeeding())
    report = await engine._finish(_empty_batch(), previous)
    assert previous.done()
    assert sum(report.counts.values()) == 0  # an empty batch: nothing to apply
