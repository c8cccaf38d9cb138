"""The hostile corpus of model answers (tests/hostile_answers.py: every class of answer once, as
raw HTTP bodies of an OpenAI-compatible gateway) through the real processes: the live
`spectral consume work-executor` and a `spectral replay work-executor` that acts as
one more executor. Whatever the gateway answers:

* both processes keep running (or exit 0 when asked to);
* every item ends as its case says (applied, or dead_letter with a reason), every parent closes;
* at most one paid call per attempt (counted at the gateway), and exactly the calls each case
  needs — nothing paid for is dropped and paid for again;
* the ledger replays consistently.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections import Counter
from pathlib import Path

import asyncpg
import pytest

from producers.work.commands import GenerateAll
from spectral.settings import Settings
from tests.fakes.openai_server import FakeModelServer
from tests.faults.work_executor.support import ROOT, SPECTRAL, executor_env, running_executor, tail
from tests.hostile_answers import Case, corpus
from tests.integration.work.kafka_support import create_work_topic, relay_running
from tests.integration.work.support import PROJECT, backlog, harness

pytestmark = [pytest.mark.integration, pytest.mark.faults]

MAX_ATTEMPTS = 3
CASES = corpus(MAX_ATTEMPTS)
NAMES = sorted(CASES)


async def _submit(url: str, document: str) -> None:
    async with harness(url) as h:
        # One epic per case; its title carries the marker that makes the gateway answer it.
        await h.commands.put_document(
            PROJECT, document, backlog(*(f"{name} [script:{name}]" for name in NAMES))
        )
        await h.commands.generate_all(GenerateAll(PROJECT, document))


async def _statuses(url: str, document: str) -> tuple[dict[str, tuple[str, str]], str]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT w.work_item_id, w.input->>'epic_id' AS epic, w.status FROM work.work_items w "
            "WHERE w.input->>'document_id' = $1",
            document,
        )
        parent = await conn.fetchval(
            "SELECT status FROM work.threads WHERE parent_thread_id IS NULL "
            "AND target_ref->>'document_id' = $1",
            document,
        )
    finally:
        await conn.close()
    by_case = {NAMES[int(r["epic"][1:]) - 1]: (str(r["work_item_id"]), r["status"]) for r in rows}
    return by_case, str(parent)


async def _until_settled(url: str, document: str, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while True:
        items, parent = await _statuses(url, document)
        if parent in ("complete", "failed") and all(
            status in ("applied", "dead_letter") for _, status in items.values()
        ):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{items} {parent}\n{tail(log)}")
        await asyncio.sleep(0.2)


async def _check(url: str, document: str, server: FakeModelServer) -> int:
    """Every case ended as it must, with the calls it needs; returns the calls counted."""
    items, parent = await _statuses(url, document)
    assert parent == "failed"  # some children were dead-lettered: the orchestration closed
    calls = Counter(c.idempotency_key for c in server.snapshot())
    assert set(calls.values()) == {1}  # at most one paid call per attempt, every attempt
    total = 0
    for name in NAMES:
        case: Case = CASES[name]
        item, status = items[name]
        assert status == case.outcome, name
        made = sum(n for key, n in calls.items() if key and key.startswith(item))
        assert made == case.calls, name
        total += made
    async with harness(url) as h:
        history = await h.history()
    assert history.consistent, history.problems
    return total


async def test_the_hostile_corpus_through_the_live_executor_and_a_replay(
    settings: Settings,
    database_url: str,
    kafka_bootstrap: str,
    spectral_env: dict[str, str],
    tmp_path: Path,
) -> None:
    await create_work_topic(kafka_bootstrap, settings.topic_prefix)
    scripts = {name: (case.status, case.body) for name, case in CASES.items()}
    log = tmp_path / "executor.log"
    with FakeModelServer(scripts=scripts) as server:
        env = executor_env(
            spectral_env,
            server,
            tmp_path / "journal",
            llm_timeout_seconds="10",
            work_lease_timeout_seconds="20",
            work_retry_base_seconds="0.1",
            work_max_attempts=str(MAX_ATTEMPTS),
        )
        async with relay_running(settings, kafka_bootstrap, database_url):
            # 1. The live executor.
            with running_executor(env, log) as live:
                await _submit(database_url, "doc-live")
                await _until_settled(database_url, "doc-live", 120, log)
                assert live.poll() is None, tail(log)
            live_calls = await _check(database_url, "doc-live", server)

            # 2. A replay of the topic, no live executor: the new items' deliveries wake its
            #    claims, which take the new items and run them.
            await _submit(database_url, "doc-replay")
            await asyncio.sleep(2.0)  # the relay publishes the new items' events
            replayed = subprocess.run(
                [SPECTRAL, "replay", "work-executor", "--from-beginning", "--json"],
                cwd=ROOT,
                env=env,
                capture_output=True,
                timeout=300,
                check=False,
            )
            assert replayed.returncode == 0, replayed.stderr.decode()[-4000:]
            report = json.loads(replayed.stdout)
            assert report["facts"]["waiting"] == len(NAMES), report
            items, _ = await _statuses(database_url, "doc-replay")
            unfinished = {
                name for name, (_, status) in items.items() if status != CASES[name].outcome
            }
            assert unfinished <= {"server_error"}, unfinished  # only the retried case is left
            # Retries are delivered later, as delayed events: the live executor finishes them.
            with running_executor(env, log):
                await _until_settled(database_url, "doc-replay", 120, log)
    replay_calls = await _check(database_url, "doc-replay", server)
    assert live_calls == replay_calls == sum(case.calls for case in CASES.values())
