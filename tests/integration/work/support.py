"""Helpers of the work tests: a seeded backlog, a scripted synthesizer, an executor driven by
explicit sweeps, and reads of the outcome straight from the tables."""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from uuid import UUID, uuid4

import asyncpg
from prometheus_client import CollectorRegistry

from consumers.work_executor.claims import ClaimRepository
from consumers.work_executor.deployment import route_resolver
from consumers.work_executor.executor import ExecutorConfig
from consumers.work_executor.handler import WorkExecutorHandler
from consumers.work_executor.metrics import ExecutorMetrics
from consumers.work_executor.outcomes import UnknownOutcomePolicy
from consumers.work_executor.schedule import Resolve
from consumers.work_executor.store import Store
from producers.work.commands import WorkCommands
from producers.work.domain.functions import Functions
from producers.work.domain.history import History, reconstruct
from producers.work.domain.read import WorkReader
from spectral.db.connect import create_pool
from spectral.errors import PermanentError, TransientError
from spectral.llm.limits import ProviderLimits
from spectral.llm.openai_compat import OpenAICompatSynthesizer
from spectral.llm.router import ModelRouter
from spectral.llm.seam import SynthesisRequest, SynthesisResponse
from spectral.llm.stub import StubSynthesizer
from spectral.observability.logging import configure_logging
from spectral.settings import Settings
from tests.fakes.openai_server import FakeModelServer

PROJECT = "p1"
DOCUMENT = "backlog-1"


def backlog(*titles: str) -> dict[str, Any]:
    """A story backlog with epics E1..En titled ``titles`` (markers script the model)."""
    return {
        "title": "Shop",
        "epics": {f"E{n}": {"title": title} for n, title in enumerate(titles, start=1)},
    }


_TRANSIENT = re.compile(r"\[transient:(\d+)\]")
_SLOW = re.compile(r"\[slow:(\d+(?:\.\d+)?)\]")


class ScriptedSynthesizer:
    """The deterministic stub behind markers in the epic title (which the prompt carries):
    ``[transient:N]`` fails the first N calls of an item, ``[transient:always]`` every call,
    ``[permanent]`` refuses, ``[invalid]`` answers garbage, ``[slow:S]`` sleeps S seconds.
    Counts calls per work item and per idempotency key — a double of the model gateway only."""

    def __init__(self) -> None:
        self.keys: Counter[str] = Counter()
        self.items: Counter[str] = Counter()
        self.in_flight = 0
        self.most_in_flight = 0
        self._stub = StubSynthesizer()

    @property
    def total(self) -> int:
        return sum(self.keys.values())

    async def synthesize(self, request: SynthesisRequest) -> SynthesisResponse:
        self.keys[request.idempotency_key] += 1
        item = request.idempotency_key.split(":")[0]
        self.items[item] += 1
        prompt = request.prompt
        slow = _SLOW.search(prompt)
        if slow:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            try:
                await asyncio.sleep(float(slow.group(1)))
            finally:
                self.in_flight -= 1
        if "[transient:always]" in prompt:
            raise TransientError("model overloaded (scripted)")
        transient = _TRANSIENT.search(prompt)
        if transient and self.items[item] <= int(transient.group(1)):
            raise TransientError("model overloaded (scripted)")
        if "[permanent]" in prompt:
            raise PermanentError("model refused the request (scripted)")
        if "[invalid]" in prompt:
            return SynthesisResponse(content="not json at all", model="scripted")
        return await self._stub.synthesize(request)


@dataclass
class Harness:
    commands: WorkCommands
    reader: WorkReader
    admin: asyncpg.Pool
    producer: asyncpg.Pool

    async def items(self) -> list[asyncpg.Record]:
        return await self.admin.fetch(
            "SELECT work_item_id, thread_id, status, attempt, not_before, error_message "
            "FROM work.work_items ORDER BY created_at, sequence"
        )

    async def thread_status(self, thread_id: UUID) -> str:
        status: str = await self.admin.fetchval(
            "SELECT status FROM work.threads WHERE thread_id = $1", thread_id
        )
        return status

    async def history(self) -> History:
        ids = [r["thread_id"] for r in await self.admin.fetch("SELECT thread_id FROM work.threads")]
        return reconstruct(await self.reader.ledger(ids))

    async def outbox_count(self, event_type: str) -> int:
        count: int = await self.admin.fetchval(
            "SELECT count(*) FROM core.outbox WHERE event_type = $1", event_type
        )
        return count


def _log_to_this_test() -> None:
    """Other tests may leave structlog writing to a stream pytest has closed since; bind it to
    this test's stderr."""
    configure_logging("INFO", "console", stream=sys.stderr)


@asynccontextmanager
async def harness(database_url: str) -> AsyncIterator[Harness]:
    _log_to_this_test()
    producer = await create_pool(database_url, role="spectral_producer", max_size=12)
    operator = await create_pool(database_url, role="spectral_operator", max_size=2)
    admin = await create_pool(database_url, max_size=2)
    try:
        yield Harness(WorkCommands(producer), WorkReader(operator), admin, producer)
    finally:
        for pool in (producer, operator, admin):
            await pool.close()


async def claim(pool: asyncpg.Pool, count: int, worker: str = "test") -> list[tuple[UUID, UUID]]:
    """Lease ``count`` waiting items under one token, as the executor's claims do (fairly, with
    their spend reserved; no provider limits, no router)."""
    claims = ClaimRepository(pool, resolve=lambda _f, _o: None, limits=ProviderLimits())
    claimed = await claims.claim(count, uuid4(), worker)
    return claimed.jobs


def executor_settings(settings: Settings, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "work_retry_base_seconds": 0.2,
        "work_sweep_interval_seconds": 3600.0,  # tests sweep explicitly
        "work_lease_timeout_seconds": 30.0,
        "llm_timeout_seconds": 5.0,
    }
    values.update(overrides)
    return settings.replace(**values)


@asynccontextmanager
async def executor(
    settings: Settings,
    database_url: str,
    synthesizer: Any,
    *,
    worker: str = "w1",
    lease_timeout: float = 30.0,
    registry: CollectorRegistry | None = None,
    limits: ProviderLimits | None = None,
    resolve: Resolve | None = None,
    store: Callable[[asyncpg.Pool, Functions], Store] = Store.over,
    unknown_outcomes: UnknownOutcomePolicy | None = None,
) -> AsyncIterator[WorkExecutorHandler]:
    handler = WorkExecutorHandler(
        settings,
        database_url,
        synthesizer,
        ExecutorMetrics(registry or CollectorRegistry()),
        ExecutorConfig(
            worker_id=worker,
            lease_timeout_seconds=lease_timeout,
            limits=limits or ProviderLimits(),
            unknown_outcomes=unknown_outcomes or UnknownOutcomePolicy(),
        ),
        resolve=resolve,
        store=store,
    )
    try:
        yield handler
    finally:
        await handler.aclose()


@asynccontextmanager
async def gateway_executor(
    settings: Settings,
    database_url: str,
    gateway: FakeModelServer,
    *,
    registry: CollectorRegistry,
    limits: dict[str, Any] | None = None,
    lease_timeout: float = 30.0,
    **overrides: Any,
) -> AsyncIterator[tuple[Harness, WorkExecutorHandler]]:
    """The harness and an executor whose calls go over HTTP to ``gateway`` (OpenAI-compatible,
    every function routed to its model ``fake-model``, with the provider ``limits`` of that
    model); ``overrides`` are further executor settings."""
    current = executor_settings(
        settings,
        synthesizer="openai",
        llm_base_url=gateway.url,
        llm_routes={"*": "fake-model"},
        **overrides,
    )
    synthesizer = OpenAICompatSynthesizer.from_settings(current)
    try:
        async with (
            harness(database_url) as h,
            executor(
                current,
                database_url,
                synthesizer,
                registry=registry,
                lease_timeout=lease_timeout,
                limits=ProviderLimits.parse({"fake-model": limits or {}}),
                resolve=route_resolver(ModelRouter.from_settings(current)),
            ) as handler,
        ):
            yield h, handler
    finally:
        await synthesizer.aclose()


async def run_until_settled(
    handler: WorkExecutorHandler,
    admin: asyncpg.Pool,
    timeout: float = 30.0,
    *,
    parked_ok: bool = False,
) -> None:
    """Sweep and drain until no item is queued, claimed, running or waiting for a retry — nor
    parked, unless ``parked_ok`` (parked items wait for their budget)."""
    live = ["queued", "claimed", "running", "failed", *([] if parked_ok else ["parked"])]
    deadline = time.monotonic() + timeout
    while True:
        await handler.sweep_once()
        await handler.drain()
        left = await admin.fetchval(
            "SELECT count(*) FROM work.work_items WHERE status = ANY($1::text[])", live
        )
        if left == 0:
            await handler.sweep_once()  # settles parents left open, refreshes gauges
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{left} items still live after {timeout}s")
        await asyncio.sleep(0.05)
