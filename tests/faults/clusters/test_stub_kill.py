"""SIGKILL across the migrated rule-stub path: a database of the old schema has rule-stub leases
mid-flight — claimed a moment ago, stale with a call in flight (at the first and at the second
attempt), waiting for a retry that is due or not yet due, finalized, given up — and a cluster
never asked. It is migrated; the tick asks for the missing stub; the work executor (`spectral
consume work-executor`, a real process) pays the stubs against a gateway that bills per
idempotency key, and is killed with SIGKILL while calls are in flight; a second executor takes
over. Every stub must end applied exactly once (none lost) and be billed exactly once (none
paid twice): a call whose outcome was unknown — in flight when the old holder stopped, or when
the executor was killed — is re-issued under the key it went out with, and no other call is sent
twice; nothing is sent for a stub that was finalized or given up, every call is on the ledger,
and the ledger is consistent."""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from uuid import UUID

import asyncpg
import pytest

from consumers.work_executor.plan import REISSUE
from producers.clusters import ClusterPolicy
from producers.work.domain.history import AttemptHistory, History, ItemHistory, reconstruct
from producers.work.domain.model import EntryType
from producers.work.domain.read import WorkReader
from spectral.db.connect import create_pool
from spectral.db.migrate import migrate
from spectral.devstack import Endpoints
from spectral.settings import Settings
from tests.fakes.openai_server import RULE_STUB, FakeModelServer
from tests.faults.work_executor.support import executor_env, start_executor, tail, wait_until
from tests.integration.clusters.legacy_stubs import MIGRATION, OldLease, insert_lease, old_requests
from tests.integration.clusters.support import failure, fetch, outbox_events, rule, service
from tests.integration.work.kafka_support import create_work_topic
from tests.support import empty_database, migrations_before

pytestmark = [pytest.mark.integration, pytest.mark.faults]

MODEL_TIMEOUT = 3.0
LEASE_TIMEOUT = MODEL_TIMEOUT + 10  # the shortest lease the executor accepts
ANSWER_SECONDS = 1.5  # how long the gateway takes: calls are in flight long enough to kill in

# The old lease of each cluster (by rule number); None: never asked before the migration.
LEASES: dict[int, OldLease | None] = {
    1: OldLease("llm", "old stub", model="old-model"),  # finalized: paid, never again
    2: OldLease("failed", attempts=3, error="max_attempts_exceeded"),  # given up
    3: OldLease("pending", age=timedelta(0)),  # claimed a moment ago: its call just left
    4: OldLease("pending", age=timedelta(0)),
    5: OldLease("pending"),  # stale: its holder stopped mid-call
    6: OldLease("pending"),
    7: OldLease("pending", attempts=2),  # stale at its second attempt
    8: OldLease("pending", retry_in=timedelta(seconds=-1), error="gateway timed out"),  # due
    9: OldLease("pending", retry_in=timedelta(seconds=2), error="gateway timed out"),  # soon
    10: None,
    11: None,
}
IN_FLIGHT_BEFORE = {
    n for n, lease in LEASES.items() if lease and lease.mode == "pending" and not lease.retry_in
}
"""The leases whose call was in flight when the old holder stopped (its outcome unknown)."""


@pytest.fixture
async def database_url(stack: Endpoints) -> AsyncIterator[str]:
    """An empty database of the test's own: the test builds the old schema in it."""
    async with empty_database(stack.database_url, "spectral_stubkill_") as url:
        yield url


async def _old_database(
    url: str, tmp_path: Path, policy: ClusterPolicy
) -> tuple[dict[int, UUID], dict[int, str]]:
    """The old schema with its clusters and their leases; the cluster of each rule number and
    the idempotency key the old service sent its stub's calls with."""
    (tmp_path / "old").mkdir()
    await migrate(url, migrations_before(MIGRATION, tmp_path / "old"))
    async with service(url, policy=policy) as svc:
        await svc.ingest(
            [failure(f"f-{n}-{i}", rule_n=n, signature=f"s{n}") for n in LEASES for i in (1, 2)]
        )
    asked = await old_requests(url, policy)
    conn = await asyncpg.connect(url)
    try:
        by_rule = {
            r["rule_id"]: r["cluster_id"]
            for r in await conn.fetch("SELECT cluster_id, rule_id FROM clusters.clusters")
        }
        clusters = {n: by_rule[rule(n)] for n in LEASES}
        for n, lease in LEASES.items():
            if lease is not None:
                await insert_lease(conn, clusters[n], asked[clusters[n]], lease)
    finally:
        await conn.close()
    return clusters, {n: asked[clusters[n]].idempotency_key for n in LEASES}


async def _live_stubs(pool: asyncpg.Pool) -> bool:
    live = await pool.fetchval(
        "SELECT count(*) FROM work.work_items WHERE function_key = 'rule_stub' "
        "AND status NOT IN ('applied', 'dead_letter', 'canceled')"
    )
    return bool(live)


async def _kill_mid_call_and_take_over(
    gateway: FakeModelServer, env: dict[str, str], log: Path, url: str
) -> set[str]:
    """An executor killed while calls are in flight, then a second one until every stub item
    ended, then the calls the killed one abandoned answered; the keys in flight at the kill."""
    admin = await create_pool(url, max_size=2)
    try:
        first = start_executor(env, log)
        try:
            await wait_until(
                "two calls in flight", lambda: len(gateway.in_progress()) >= 2, 60, log, 0.02
            )
            os.kill(first.pid, signal.SIGKILL)
            await wait_until("the executor died", lambda: first.poll() is not None, 30, log)
            await asyncio.sleep(0.2)  # a request the kernel had sent reaches the gateway
            killed_in_flight = gateway.in_progress()
        finally:
            if first.poll() is None:
                first.kill()
        assert first.returncode == -signal.SIGKILL, tail(log)
        second = start_executor(env, log)
        try:

            async def ended() -> bool:
                return not await _live_stubs(admin)

            await wait_until("every stub item ended", ended, LEASE_TIMEOUT + 60, log, 0.2)
        finally:
            second.send_signal(signal.SIGTERM)
            assert second.wait(timeout=30) == 0, tail(log)
    finally:
        await admin.close()
    await wait_until("abandoned calls answered", lambda: not gateway.in_progress(), 10, log)
    return killed_in_flight


@dataclass(frozen=True)
class Stubs:
    """Per rule number: the stub item's status, its document (version, stub), its ledger."""

    status: dict[int, str]
    documents: dict[int, tuple[int, str | None]]
    history: History
    rule_of_item: dict[UUID, int]

    @property
    def key_of(self) -> dict[tuple[UUID, int], str]:
        """The idempotency key each attempt's call went out with."""
        return {
            (item.work_item_id, e.attempt): str(e.payload["idempotency_key"])
            for item in self.history.items.values()
            for e in item.entries
            if e.entry_type is EntryType.PROMPT
        }

    def attempts(self) -> Iterator[tuple[ItemHistory, AttemptHistory]]:
        for item in self.history.items.values():
            for attempt in item.attempts.values():
                yield item, attempt


async def _stubs(url: str, clusters: dict[int, UUID]) -> Stubs:
    rule_of = {c: n for n, c in clusters.items()}
    items = await fetch(
        url,
        "SELECT (input ->> 'cluster_id')::uuid AS cluster, work_item_id, thread_id, status "
        "FROM work.work_items WHERE function_key = 'rule_stub'",
    )
    documents = await fetch(
        url,
        "SELECT (content ->> 'cluster_id')::uuid AS cluster, version, "
        "content ->> 'rule_stub' AS stub FROM work.documents WHERE doc_type = 'rule_stub'",
    )
    pool = await create_pool(url, role="spectral_operator", max_size=2)
    try:
        history = reconstruct(await WorkReader(pool).ledger([i["thread_id"] for i in items]))
    finally:
        await pool.close()
    return Stubs(
        status={rule_of[i["cluster"]]: i["status"] for i in items},
        documents={rule_of[d["cluster"]]: (d["version"], d["stub"]) for d in documents},
        history=history,
        rule_of_item={i["work_item_id"]: rule_of[i["cluster"]] for i in items},
    )


async def test_sigkill_mid_call_across_the_stub_migration_pays_every_stub_once_and_loses_none(
    database_url: str,
    settings: Settings,
    kafka_bootstrap: str,
    spectral_env: dict[str, str],
    tmp_path: Path,
) -> None:
    url = database_url
    policy = ClusterPolicy()
    clusters, old_keys = await _old_database(url, tmp_path, policy)
    await migrate(url)
    await create_work_topic(kafka_bootstrap, settings.topic_prefix)
    async with service(url, policy=policy) as svc:
        await svc.tick()  # asks for the stubs of the clusters never asked (10, 11)

    with FakeModelServer(idempotent=True, delay=ANSWER_SECONDS) as gateway:
        # The provider billed what the old service paid for: the finalized stub's call and the
        # calls that were in flight when the old holders stopped (it completed them).
        billed_before = [old_keys[n] for n in {1} | IN_FLIGHT_BEFORE]
        gateway.billed_before(*billed_before)
        env = executor_env(
            spectral_env,
            gateway,
            tmp_path / "journal",
            llm_timeout_seconds=str(MODEL_TIMEOUT),
            work_lease_timeout_seconds=str(LEASE_TIMEOUT),
            work_max_attempts="5",
            work_pool_size="4",
            work_claim_poll_seconds="0.2",
        )
        killed_in_flight = await _kill_mid_call_and_take_over(
            gateway, env, tmp_path / "executor.log", url
        )
        billed = Counter(gateway.answered) + Counter(billed_before)
        sent = Counter(call.idempotency_key or "" for call in gateway.snapshot())

    assert killed_in_flight, "the kill found no call in flight"
    stubs = await _stubs(url, clusters)
    # Nothing lost: every stub still wanted is applied once; the given-up one stays given up.
    assert stubs.status == {n: "dead_letter" if n == 2 else "applied" for n in LEASES}
    assert stubs.documents == {
        n: (1, None) if n == 2 else (2, "old stub" if n == 1 else RULE_STUB) for n in LEASES
    }
    assert stubs.history.consistent, stubs.history.problems

    # Every call is an attempt the ledger holds the prompt of (every bill is on the ledger),
    # and nothing was sent for the finalized and the given-up stub.
    prompted = {
        str(e.payload["idempotency_key"]): stubs.rule_of_item[item.work_item_id]
        for item in stubs.history.items.values()
        for e in item.entries
        if e.entry_type is EntryType.PROMPT
    }
    assert set(sent) | set(billed) <= set(prompted), set(sent) | set(billed) - set(prompted)
    assert not {prompted[k] for k in sent} & {1, 2}

    # Each stub is billed exactly once: a call whose outcome an executor could not know — in
    # flight when the old holder stopped, or when the executor was killed — is re-issued under
    # the key it was sent with (the old service's, for a lease that moved onto the ledger), and
    # the gateway answers it without billing it again.
    applied = {stubs.key_of[(i.work_item_id, a.attempt)] for i, a in stubs.attempts() if a.mutation}
    reissued = {
        stubs.key_of[(i.work_item_id, a.attempt)]
        for i, a in stubs.attempts()
        if any(e.get("disposition") == REISSUE for e in a.errors)
    }
    assert Counter(prompted[k] for k in billed) == {n: 1 for n in LEASES if n != 2}, billed
    assert set(billed) == applied
    assert {old_keys[n] for n in IN_FLIGHT_BEFORE} | killed_in_flight <= reissued
    # No call is sent twice, but to re-issue one whose outcome was not known.
    assert {k for k, times in sent.items() if times > 1} <= reissued, sent

    # The tick publishes every cluster with its stub (the given-up one without).
    async with service(url, policy=policy) as svc:
        await svc.tick()
    latest = {e.payload.cluster_id: e.payload for _, e in await outbox_events(url)}
    assert {n for n in LEASES if latest[clusters[n]].suggested_rule_stub} == set(LEASES) - {2}
