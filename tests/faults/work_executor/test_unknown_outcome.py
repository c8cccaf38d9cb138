"""SIGKILL of `spectral consume work-executor` (a real process) while its paid call is in flight,
against a gateway stand-in that honours idempotency keys and counts what it bills (issue 23).

The call's outcome is unknown to the successor: the provider may have done it. Under the default
policy the successor re-issues the same call under the same idempotency key — the gateway
answers with the first call's answer and does not bill again — and that answer settles the
attempt's reservation, once. Nothing is paid twice, the reservation is resolved, the ledger
replays consistently and records the re-issue.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from producers.work.commands import GenerateAll
from producers.work.domain.model import EntryType
from tests.fakes.openai_server import FakeModelServer
from tests.faults.work_executor.support import ExecutorRig, wait_until
from tests.integration.work.kafka_support import settled
from tests.integration.work.support import DOCUMENT, PROJECT, backlog

pytestmark = [pytest.mark.integration, pytest.mark.faults]

LEASE_TIMEOUT = 12.0  # the model timeout (2 s) + 10 s, the shortest allowed


async def test_sigkill_mid_call_then_the_call_is_reissued_under_its_key_and_paid_once(
    rig: ExecutorRig,
) -> None:
    h = rig.h
    with FakeModelServer(idempotent=True) as gateway:
        env = rig.env(
            gateway,
            llm_timeout_seconds="2",
            work_lease_timeout_seconds=str(LEASE_TIMEOUT),
            work_pool_size="2",
        )
        await h.commands.put_document(PROJECT, DOCUMENT, backlog("Checkout [slow:1.5]"))
        parent = await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT))
        first = rig.start(env)
        await wait_until("the call in flight", gateway.snapshot, 60, rig.log)
        await asyncio.sleep(0.3)
        await rig.killed(first, timeout=30)
        # Its reservation is held, counted in full, while nobody knows the outcome.
        [held] = await h.admin.fetch("SELECT attempt, state FROM work.spend")
        assert (held["attempt"], held["state"]) == (1, "reserved")

        with rig.running(env):
            await settled(h.admin, timeout=LEASE_TIMEOUT + 45)

        [item] = await h.items()
        assert (item["status"], item["attempt"]) == ("applied", 1)
        assert await h.thread_status(parent.thread_id) == "complete"
        key = f"{item['work_item_id']}:1"
        # The same call twice, under the same key: the second got the first answer.
        assert [c.idempotency_key for c in gateway.snapshot()] == [key, key]
        # Billed once: 0 paid twice.
        assert gateway.answered == [key]
        # The reservation is resolved once, from the answer's usage (11 + 22 tokens).
        spend = await h.admin.fetch(
            "SELECT attempt, state, tokens, reissues, released_unknown_at FROM work.spend"
        )
        assert [dict(s) for s in spend] == [
            {
                "attempt": 1,
                "state": "settled",
                "tokens": 33,
                "reissues": 1,
                "released_unknown_at": None,
            }
        ]
        history = await h.history()
        assert history.consistent, history.problems
        [story] = history.items.values()
        assert story.paid_calls == 1
        errors = [e.payload for e in story.entries if e.entry_type is EntryType.ERROR]
        assert [(e["kind"], e["disposition"]) for e in errors] == [("outcome_unknown", "reissue")]
        assert Counter(e.entry_type for e in story.entries)[EntryType.RESPONSE] == 1
