"""A cancellation releases the reservations of work that will not run within a second, and
settles calls in flight to what they used (issue 23) — against `spectral consume work-executor`
as a real process, the real database, and the fake OpenAI-compatible gateway counting calls.

* Claimed, never started: the executor that leased two items (and reserved their calls) is
  SIGKILLed before it starts them — the leases stay held until the lease timeout, but nothing
  can start them once their cancellation is asked for, so the cancel releases their
  reservations itself, at once, instead of leaving them counted until a successor recovers the
  leases.
* In flight: a call is running when the cancel comes. Its reservation stays (the provider is
  doing the call) until its answer comes in, then settles to the usage it reports; the item
  ends canceled, nothing applied. A queued item of the same thread ends at once, never reserved.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import asyncpg
import pytest

from producers.work.cancel import Disposition, cancel_thread
from producers.work.commands import GenerateAll
from tests.fakes.openai_server import FakeModelServer
from tests.faults.work_executor.support import ExecutorRig, wait_until
from tests.integration.work.kafka_support import settled
from tests.integration.work.support import DOCUMENT, PROJECT, backlog

pytestmark = [pytest.mark.integration, pytest.mark.faults]

RELEASE_BOUND = 1.0  # seconds: the bound for releasing what will not run


def _env(rig: ExecutorRig, server: FakeModelServer, **extra: str) -> dict[str, str]:
    return rig.env(
        server,
        llm_timeout_seconds="5",
        work_lease_timeout_seconds="15",
        work_pool_size="4",
        work_claim_poll_seconds="0.2",
        **extra,
    )


async def _reserved(admin: asyncpg.Pool) -> int:
    """Reservations still held for attempts that have not started (claimed, not called)."""
    return int(
        await admin.fetchval(
            "SELECT count(*) FROM work.spend s JOIN work.work_items w USING (work_item_id) "
            "WHERE s.state = 'reserved' AND s.attempt > w.attempt"
        )
    )


async def _released_within(admin: asyncpg.Pool, bound: float) -> float:
    started = time.monotonic()
    while await _reserved(admin) > 0:
        if time.monotonic() - started > bound:
            raise AssertionError(f"reservations of canceled work still held after {bound}s")
        await asyncio.sleep(0.02)
    return time.monotonic() - started


async def test_a_cancel_releases_the_reservations_of_claimed_work_its_dead_holder_will_not_run(
    rig: ExecutorRig,
) -> None:
    h = rig.h
    with FakeModelServer() as server:
        await h.commands.put_document(PROJECT, DOCUMENT, backlog("One", "Two"))
        parent = await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT))
        await rig.died(rig.start(_env(rig, server, work_crash_at="after_claim")))
        assert await _reserved(h.admin) >= 1  # leased and reserved, never started

        result = await cancel_thread(h.producer, parent.thread_id, reason="stop")
        assert result.disposition is Disposition.CANCELING
        await _released_within(h.admin, RELEASE_BOUND)

        # A successor recovers the leases later and ends the items canceled, calling nothing.
        with rig.running(_env(rig, server)):
            await settled(h.admin, timeout=60)
        assert {r["status"] for r in await h.items()} == {"canceled"}
        assert await h.thread_status(parent.thread_id) == "canceled"
        assert server.snapshot() == []
        spend = Counter(r["state"] for r in await h.admin.fetch("SELECT state FROM work.spend"))
        assert set(spend) == {"released"}
        history = await h.history()
        assert history.consistent, history.problems


async def test_a_cancel_settles_a_call_in_flight_to_its_usage_and_ends_queued_work_at_once(
    rig: ExecutorRig,
) -> None:
    h = rig.h
    with FakeModelServer() as server:
        await h.commands.put_document(PROJECT, DOCUMENT, backlog("One [slow:1.5]", "Two"))
        parent = await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT))
        await h.admin.execute(  # E2 waits: it is canceled without ever being claimed
            "UPDATE work.work_items SET not_before = now() + interval '1 hour' "
            "WHERE input->>'epic_id' = 'E2'"
        )
        with rig.running(_env(rig, server)):
            await wait_until("the call in flight", lambda: len(server.snapshot()) == 1, 60, rig.log)
            result = await cancel_thread(h.producer, parent.thread_id, reason="stop")
            assert (result.canceled_items, result.in_flight_items) == (1, 1)
            await _released_within(h.admin, RELEASE_BOUND)  # nothing unstarted is held
            # The call in flight keeps its reservation until it answers...
            held = await h.admin.fetchval("SELECT state FROM work.spend")
            assert held in ("reserved", "settled")
            await settled(h.admin, timeout=60)
        # ... and is settled to what it used: the gateway reports 11 + 22 tokens.
        [spend] = await h.admin.fetch("SELECT state, tokens FROM work.spend")
        assert (spend["state"], spend["tokens"]) == ("settled", 33)
        assert {r["status"] for r in await h.items()} == {"canceled"}
        assert await h.thread_status(parent.thread_id) == "canceled"
        assert len(server.snapshot()) == 1
        assert await h.admin.fetchval("SELECT count(*) FROM work.mutations") == 0
        history = await h.history()
        assert history.consistent, history.problems
