"""SIGKILL of the work executor (`spectral consume work-executor`, a real process) at each step
of an item: after the claim, before the call, during the call (a slow model on loopback), after
the response, after the mutation. A second executor takes over. Every item must end terminal,
the model must be called at most once per attempt (counted by the fake OpenAI-compatible server
the executors call over HTTP) and never more often than the attempt limit, and the ledger must
replay consistently.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from producers.work.commands import GenerateAll
from spectral.settings import Settings
from tests.fakes.openai_server import FakeModelServer
from tests.faults.work_executor.support import executor_env, start_executor
from tests.integration.work.kafka_support import create_work_topic, relay_running, settled
from tests.integration.work.support import DOCUMENT, PROJECT, backlog, harness

pytestmark = [pytest.mark.integration, pytest.mark.faults]

LEASE_TIMEOUT = 14.0  # must exceed the model timeout (4 s) by 10 s: see consumers/work_executor
MAX_ATTEMPTS = 3


def _executor_env(
    base: dict[str, str], server: FakeModelServer, journal: Path, crash_at: str | None
) -> dict[str, str]:
    env = executor_env(
        base,
        server,
        journal,
        llm_timeout_seconds="4",  # a 1.5 s call re-issued on a loaded machine still answers
        work_lease_timeout_seconds=str(LEASE_TIMEOUT),
        work_max_attempts=str(MAX_ATTEMPTS),
        work_pool_size="1",
    )
    if crash_at:
        env["SPECTRAL_WORK_CRASH_AT"] = crash_at
    return env


async def _wait_exit(process: subprocess.Popen[bytes], timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while process.poll() is None:
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError("the executor did not die at its crash point in time")
        await asyncio.sleep(0.05)
    return process.returncode


async def _wait_for_call(server: FakeModelServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not server.snapshot():
        if time.monotonic() > deadline:
            raise AssertionError("the model was never called")
        await asyncio.sleep(0.02)


# (kill point, how many paid calls the model sees in total for the two items)
CASES = [
    ("after_claim", 2),  # nothing recorded: the recovered item starts attempt 1
    ("before_call", 2),  # attempt 1 recorded but never sent: used up, attempt 2 pays
    ("during", 3),  # attempt 1 paid, outcome unknown: re-issued under its key, which this
    # gateway (it ignores keys) pays again (one more per item whose call was in flight)
    ("after_response", 2),  # the recorded response is reused: no second call
    ("after_mutation", 2),  # already applied: only the parent is left to settle
]


@pytest.mark.parametrize(("point", "expected_calls"), CASES, ids=[c[0] for c in CASES])
async def test_sigkill_at_each_step_leaves_every_item_terminal_and_pays_at_most_once_per_attempt(
    *,
    point: str,
    expected_calls: int,
    database_url: str,
    settings: Settings,
    kafka_bootstrap: str,
    spectral_env: dict[str, str],
    tmp_path: Path,
) -> None:
    await create_work_topic(kafka_bootstrap, settings.topic_prefix)
    slow = " [slow:1.5]" if point == "during" else ""
    log = tmp_path / "executor.log"
    with FakeModelServer() as server:
        async with (
            harness(database_url) as h,
            relay_running(settings, kafka_bootstrap, database_url),
        ):
            await h.commands.put_document(
                PROJECT, DOCUMENT, backlog(f"Checkout{slow}", f"Search{slow}")
            )
            parent = await h.commands.generate_all(GenerateAll(PROJECT, DOCUMENT))
            first = start_executor(
                _executor_env(
                    spectral_env, server, tmp_path / "journal", None if point == "during" else point
                ),
                log,
            )
            try:
                if point == "during":
                    await _wait_for_call(server, timeout=60)
                    await asyncio.sleep(0.3)  # the call is in flight on the server
                    # Each call in flight now (the other item's too, when a loaded machine
                    # let its claim come within the sleep) is paid with an unknown outcome.
                    in_flight = len(server.snapshot())
                    os.kill(first.pid, signal.SIGKILL)
                    expected_calls = 2 + in_flight
                code = await _wait_exit(first, timeout=60)
            finally:
                if first.poll() is None:
                    first.kill()
            assert code == -signal.SIGKILL, log.read_text()[-3000:]
            second = start_executor(
                _executor_env(spectral_env, server, tmp_path / "journal", None), log
            )
            try:
                await settled(h.admin, timeout=LEASE_TIMEOUT + 45)
            finally:
                second.send_signal(signal.SIGTERM)
                assert second.wait(timeout=30) == 0, log.read_text()[-3000:]

            items = await h.items()
            assert {i["status"] for i in items} == {"applied"}, [dict(i) for i in items]
            assert await h.thread_status(parent.thread_id) == "complete"
            calls = server.snapshot()
            per_key = Counter(c.idempotency_key for c in calls)
            per_item = Counter(c.item for c in calls)
            # At most one paid call per attempt — but for a call whose outcome was unknown,
            # re-issued under the same key (a gateway honouring it would not bill it twice).
            repeated = {key for key, times in per_key.items() if times > 1}
            assert max(per_key.values()) <= 2
            assert len(repeated) == (expected_calls - 2 if point == "during" else 0), per_key
            assert max(per_item.values()) <= MAX_ATTEMPTS
            assert len(calls) == expected_calls, (per_key, log.read_text()[-3000:])
            history = await h.history()
            assert history.consistent, history.problems
            sent = {key for key in per_key if key is not None}
            for item in history.items.values():
                assert item.outcome.value == "applied"
                # Every call that reached the model was recorded as a prompt first.
                prompts = {
                    f"{item.work_item_id}:{n}"
                    for n, attempt in item.attempts.items()
                    if attempt.paid
                }
                assert {k for k in sent if k.startswith(str(item.work_item_id))} <= prompts
                assert item.paid_calls <= MAX_ATTEMPTS
            document = await h.reader.document(DOCUMENT)
            assert document is not None
            assert document.version == 3  # exactly one mutation per epic
