"""PostgreSQL stopped for real under `spectral consume work-executor` while its paid calls are in
flight, and the executor SIGKILLed while the database is away: no paid answer is lost and none
is paid for twice.

A private PostgreSQL server (stopping it disturbs no other test), the fake OpenAI-compatible
gateway on loopback counting every call, 40 items of one generate-all in flight at once (3 s
calls):

1. the database is stopped as the calls are sent and stays away longer than the lease timeout;
   the answers arrive during the outage (journal first, then waited out). When it is back, every
   item is applied with exactly one paid call each — the executor's own sweep never took its
   in-flight items for stale, however old their leases had grown;
2. the database is stopped again under a second generate-all, the answers arrive, and the
   executor is SIGKILLed while the database is still away: the answers exist only in the
   response journal. A new executor replays the journal before it recovers the stale leases,
   reuses every answer, and pays nothing again.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest

from producers.work.commands import GenerateAll
from spectral.db.migrate import migrate
from spectral.devstack.postgres import LocalPostgres
from tests.fakes.openai_server import FakeModelServer
from tests.faults.work_executor.support import executor_env, start_executor, tail, wait_until
from tests.integration.work.kafka_support import create_work_topic
from tests.integration.work.support import PROJECT, backlog, harness

pytestmark = [pytest.mark.integration, pytest.mark.faults]

ITEMS = 40
CALL_SECONDS = 3.0
LLM_TIMEOUT = 8.0
LEASE_TIMEOUT = 18.0  # the shortest allowed: the model timeout + 10 s
OUTAGE = 25.0  # longer than the lease timeout


def _journaled(journal: Path, items: set[str]) -> int:
    """How many answers for ``items`` the journal's files hold. Only whole lines count: the
    executor may be appending while the test reads (a line without its newline is unfinished)."""
    return sum(
        json.loads(line)["work_item_id"] in items
        for path in journal.glob("responses-*.jsonl")
        for line in path.read_bytes().split(b"\n")[:-1]
    )


async def _outcome(url: str, document: str) -> tuple[Counter[str], str]:
    conn = await asyncpg.connect(url)
    try:
        items = await conn.fetch(
            "SELECT status FROM work.work_items WHERE input->>'document_id' = $1", document
        )
        parent = await conn.fetchval(
            "SELECT status FROM work.threads WHERE parent_thread_id IS NULL "
            "AND target_ref->>'document_id' = $1",
            document,
        )
    finally:
        await conn.close()
    return Counter(r["status"] for r in items), str(parent)


async def _settled(url: str, document: str) -> bool:
    try:
        items, parent = await _outcome(url, document)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
        return False
    return items == Counter(applied=ITEMS) and parent == "complete"


async def _submit(url: str, document: str) -> set[str]:
    """A generate-all of ITEMS slow epics; returns its work items."""
    async with harness(url) as h:
        titles = [f"Epic {n} [slow:{CALL_SECONDS}]" for n in range(ITEMS)]
        await h.commands.put_document(PROJECT, document, backlog(*titles))
        await h.commands.generate_all(GenerateAll(PROJECT, document))
        rows = await h.admin.fetch(
            "SELECT work_item_id FROM work.work_items WHERE input->>'document_id' = $1", document
        )
    return {str(r["work_item_id"]) for r in rows}


def _calls(server: FakeModelServer, since: int) -> list[str]:
    return [c.idempotency_key or "" for c in server.snapshot()[since:]]


@dataclass
class _Stack:
    database: LocalPostgres
    url: str
    server: FakeModelServer
    env: dict[str, str]
    journal: Path
    log: Path
    executor: subprocess.Popen[bytes] | None = None


async def _outage_longer_than_the_lease(s: _Stack) -> None:
    assert s.executor is not None
    items = await _submit(s.url, "doc-a")
    await wait_until("all calls in flight", lambda: len(s.server.snapshot()) == ITEMS, 60, s.log)
    s.database.stop()
    started = time.monotonic()
    await wait_until("all answers delivered", lambda: len(s.server.answered) == ITEMS, 30, s.log)
    await wait_until("answers journaled", lambda: _journaled(s.journal, items) == ITEMS, 10, s.log)
    await asyncio.sleep(max(OUTAGE - (time.monotonic() - started), 0))
    assert s.executor.poll() is None, tail(s.log)
    s.database.start()
    await wait_until("doc-a applied", lambda: _settled(s.url, "doc-a"), 90, s.log)
    paid = _calls(s.server, 0)
    assert len(paid) == ITEMS  # one paid call per item: nothing paid twice
    assert set(Counter(paid).values()) == {1}
    assert "recovered stale leases" not in s.log.read_text()


async def _sigkill_during_the_outage(s: _Stack) -> None:
    assert s.executor is not None
    items = await _submit(s.url, "doc-b")
    await wait_until(
        "all calls in flight", lambda: len(s.server.snapshot()) == 2 * ITEMS, 60, s.log
    )
    s.database.stop()
    await wait_until(
        "all answers delivered", lambda: len(s.server.answered) == 2 * ITEMS, 30, s.log
    )
    await wait_until("answers journaled", lambda: _journaled(s.journal, items) == ITEMS, 10, s.log)
    os.kill(s.executor.pid, signal.SIGKILL)
    s.executor.wait(timeout=10)
    s.database.start()
    s.executor = start_executor(s.env, s.log)
    await wait_until("doc-b applied", lambda: _settled(s.url, "doc-b"), LEASE_TIMEOUT + 90, s.log)
    paid = _calls(s.server, ITEMS)
    assert len(paid) == ITEMS  # the journal's answers were reused, none paid again
    assert set(Counter(paid).values()) == {1}
    assert list(s.journal.glob("responses-*.jsonl")) == []  # replayed and removed
    assert "replayed a response journal" in s.log.read_text()
    async with harness(s.url) as h:
        history = await h.history()
    assert history.consistent, history.problems
    assert {i.paid_calls for i in history.items.values()} == {1}
    assert {i.outcome.value for i in history.items.values()} == {"applied"}


async def test_paid_answers_survive_a_database_outage_and_a_sigkill_during_it(
    kafka_bootstrap: str, topic_prefix: str, spectral_env: dict[str, str], tmp_path: Path
) -> None:
    database = LocalPostgres(tmp_path / "pg")
    url = database.ensure_running()
    await create_work_topic(kafka_bootstrap, topic_prefix)
    s: _Stack | None = None
    try:
        await migrate(url)
        with FakeModelServer() as server:
            journal = tmp_path / "journal"
            env = executor_env(
                {
                    **spectral_env,
                    "SPECTRAL_TOPIC_PREFIX": topic_prefix,
                    "SPECTRAL_DATABASE_URL": url,
                },
                server,
                journal,
                llm_timeout_seconds=str(LLM_TIMEOUT),
                work_lease_timeout_seconds=str(LEASE_TIMEOUT),
                work_pool_size=str(ITEMS),
            )
            s = _Stack(database, url, server, env, journal, tmp_path / "executor.log")
            s.executor = start_executor(env, s.log)
            await _outage_longer_than_the_lease(s)
            await _sigkill_during_the_outage(s)
            s.executor.send_signal(signal.SIGTERM)
            assert s.executor.wait(timeout=60) == 0, tail(s.log)
    finally:
        if s is not None and s.executor is not None and s.executor.poll() is None:
            s.executor.kill()
            s.executor.wait()
        database.stop(wipe=True)
