"""SIGKILL of the work executor (`spectral consume work-executor`, a real process calling the
fake OpenAI-compatible gateway over HTTP) during a cancellation and during the settlement of a
budget. A second executor takes over. The gateway counts every call.

* During a cancellation: a generate-all is canceled while two calls are in flight, and the
  executor is killed — while the calls are still running, or once their answers were recorded
  and before they were concluded. Every item must end canceled, nothing be applied, the parent
  close, and no call be made again (the unknown outcome and the recorded answers both keep
  their spend counted).
* During settlement: the executor journals a paid answer and is killed before the answer is in
  the ledger, so its reservation is not settled yet. The successor replays the journal, which
  settles the reservation from the answer's usage — once — and goes on within the org's budget:
  the budget is never exceeded, the work over it is parked, every call is paid once.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from producers.work.budgets import BudgetCommands
from producers.work.cancel import Disposition, cancel_thread
from producers.work.commands import GenerateAll
from producers.work.domain.budgets import Period
from producers.work.domain.story.prompts import prompt_bytes_bound, prompt_tokens_bound
from tests.fakes.openai_server import FakeModelServer
from tests.faults.work_executor.support import ExecutorRig, wait_until
from tests.integration.work.kafka_support import settled
from tests.integration.work.support import DOCUMENT, PROJECT, backlog

pytestmark = [pytest.mark.integration, pytest.mark.faults]

LEASE_TIMEOUT = 12.0  # the model timeout (2 s) + 10 s, the shortest allowed


def _env(rig: ExecutorRig, server: FakeModelServer, crash_at: str | None) -> dict[str, str]:
    env = rig.env(
        server,
        llm_timeout_seconds="2",
        work_lease_timeout_seconds=str(LEASE_TIMEOUT),
        work_pool_size="4",
        work_claim_poll_seconds="0.2",
        llm_limits=json.dumps({"*": {"max_tokens": 100}}),
    )
    if crash_at:
        env["SPECTRAL_WORK_CRASH_AT"] = crash_at
    return env


async def _successor_settles(
    rig: ExecutorRig, server: FakeModelServer, *, parked_ok: bool = False
) -> None:
    with rig.running(_env(rig, server, None)):
        if parked_ok:

            async def quiet() -> bool:
                live = await rig.h.admin.fetchval(
                    "SELECT count(*) FROM work.work_items "
                    "WHERE status IN ('queued', 'claimed', 'running', 'failed')"
                )
                return int(live) == 0

            await wait_until("every item ended or parked", quiet, LEASE_TIMEOUT + 45, rig.log)
        else:
            await settled(rig.h.admin, timeout=LEASE_TIMEOUT + 45)


@pytest.mark.parametrize(
    "kill",
    [
        # Killed with the calls still running: outcome unknown, both counted and never called
        # again (the outage tests hold the same for a killed call without a cancellation).
        pytest.param("during_calls", marks=pytest.mark.slow),
        "after_answers_recorded",
    ],
)
async def test_sigkill_during_a_cancellation_pays_nothing_again_and_applies_nothing(
    kill: str,
    rig: ExecutorRig,
) -> None:
    h = rig.h
    crash = "after_response" if kill == "after_answers_recorded" else None
    with FakeModelServer() as server:
        await h.commands.put_document(
            PROJECT, DOCUMENT, backlog("One [slow:1.5]", "Two [slow:1.5]", "Three")
        )
        parent = await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT))
        await h.admin.execute(  # a route proven before: both calls go out at once
            "INSERT INTO work.provider_routes (model, probation) VALUES ('fake-model', false)"
        )
        await h.admin.execute(  # E3 waits: it is canceled without ever being claimed
            "UPDATE work.work_items SET not_before = now() + interval '1 hour' "
            "WHERE input->>'epic_id' = 'E3'"
        )
        first = rig.start(_env(rig, server, crash))
        await wait_until("two calls in flight", lambda: len(server.snapshot()) == 2, 60, rig.log)
        result = await cancel_thread(h.producer, parent.thread_id, reason="stop")
        assert result.disposition is Disposition.CANCELING
        assert (result.canceled_items, result.in_flight_items) == (1, 2)
        if crash is None:
            await rig.killed(first)  # the calls are still running
        else:
            await rig.died(first)
        await _successor_settles(rig, server)

        assert {r["status"] for r in await h.items()} == {"canceled"}
        assert await h.thread_status(parent.thread_id) == "canceled"
        calls = server.snapshot()
        assert len(calls) == 2  # nothing was paid again
        assert max(Counter(c.idempotency_key for c in calls).values()) == 1
        assert await h.admin.fetchval("SELECT count(*) FROM work.mutations") == 0
        history = await h.history()
        assert history.consistent, history.problems
        responses = sum(i.responses for i in history.items.values())
        # Recorded answers are kept. Killed after a response write: its answers are recorded
        # (both, when they came in together; on a loaded machine the other call may still
        # have been in flight, its outcome then unknown).
        assert responses in ((1, 2) if crash else (0,))
        spend = Counter(r["state"] for r in await h.admin.fetch("SELECT state FROM work.spend"))
        # Both calls were sent: answered ones settle, unknown ones stay counted in full.
        assert spend == Counter({"settled": responses, "unknown": 2 - responses}) - Counter()


async def test_sigkill_during_settlement_settles_once_and_never_exceeds_the_budget(
    rig: ExecutorRig,
) -> None:
    h = rig.h
    with FakeModelServer() as server:
        budgets = BudgetCommands(h.producer)
        await h.commands.put_document(PROJECT, DOCUMENT, backlog(*(f"Epic {n}" for n in range(6))))
        # A call reserves its prompt's bound plus max_tokens; each answer reports 33 tokens.
        # The budget fits two settled answers and one more reservation: three calls of six.
        reserved = (
            prompt_tokens_bound(
                prompt_bytes_bound(
                    epic_id_bytes=2, title_bytes=7, backlog_title_bytes=4, description_bytes=0
                )
            )
            + 100
        )
        limit = reserved + 2 * 33 + 10
        first = rig.start(_env(rig, server, "before_settlement"))
        await budgets.set("acme", Period.DAY, token_limit=limit)
        await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT, org_id="acme"))
        await rig.died(first)
        assert len(server.snapshot()) == 1  # one answer paid, journaled, not settled
        unsettled = await h.admin.fetchval(
            "SELECT count(*) FROM work.spend WHERE state = 'reserved'"
        )
        assert unsettled == 1
        await _successor_settles(rig, server, parked_ok=True)

        view = await budgets.get("acme")
        assert view is not None
        assert view.tokens <= limit
        assert view.outstanding == 0
        statuses = Counter(r["status"] for r in await h.items())
        assert statuses == {"applied": 3, "parked": 3}
        calls = server.snapshot()
        assert len(calls) == 3
        assert max(Counter(c.idempotency_key for c in calls).values()) == 1
        spend = await h.admin.fetch("SELECT state, tokens FROM work.spend ORDER BY reserved_at")
        assert [(r["state"], r["tokens"]) for r in spend] == [("settled", 33)] * 3
        assert view.tokens == 3 * 33
        history = await h.history()
        assert history.consistent, history.problems
