"""The suggested rule stub as work on the work ledger: asked once per cluster content, paid by
the work executor under its lease and attempt limit, the snapshot held back while the first
call is to come, published without the stub when the work fails or takes too long and again
with it when it comes, work of an outdated content canceled without a call, hostile answers
ending their own item — and the tick never paying or failing for any of it."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from producers.clusters import ClusterPolicy
from spectral.errors import PermanentError, TransientError
from spectral.llm.answers import response_content
from spectral.llm.seam import SynthesisRequest, SynthesisResponse
from spectral.settings import Settings
from tests.hostile_answers import ANSWER_CONTENT, ANY_TEXT, hostile_text
from tests.integration.clusters.support import (
    CountingSynthesizer,
    failure,
    fetch,
    outbox_events,
    rule,
    service,
    settle_stubs,
    stub_executor,
)

pytestmark = pytest.mark.integration


class AnsweringSynthesizer(CountingSynthesizer):
    """Answers every rule-stub call with ``content`` — the empty answer too — (or raises
    ``error``, the first ``failures`` calls only when given); without ``content``, as the stub
    generator would."""

    def __init__(
        self,
        content: str | None = None,
        error: Exception | None = None,
        failures: int | None = None,
    ) -> None:
        super().__init__()
        self.content = content
        self.error = error
        self.failures = failures

    async def synthesize(self, request: SynthesisRequest) -> SynthesisResponse:
        self.calls[request.idempotency_key] += 1
        if self.error is not None and (self.failures is None or self.total <= self.failures):
            raise self.error
        if self.content is None:
            return await self._inner.synthesize(request)
        return SynthesisResponse(content=self.content, model="stub\x00model", usage={"t": 1})


async def _stub_items(database_url: str) -> list[dict[str, Any]]:
    rows = await fetch(
        database_url,
        "SELECT w.status, w.attempt, t.status AS thread_status, t.idempotency_key "
        "FROM work.work_items w JOIN work.threads t USING (thread_id) "
        "WHERE w.function_key = 'rule_stub' ORDER BY w.created_at",
    )
    return [dict(r) for r in rows]


async def test_a_stub_is_asked_once_and_its_snapshot_waits_for_it(
    database_url: str, settings: Settings
) -> None:
    model = CountingSynthesizer()
    async with service(database_url) as svc:
        await svc.ingest([failure("f-1"), failure("f-2")])
        first = await svc.tick()
        assert (first.stubs_asked, first.stubs_held, first.published) == (1, 1, 0)
        again = await svc.tick()  # still to come: held, not asked again
        assert (again.stubs_asked, again.stubs_held, again.published) == (0, 1, 0)
        assert model.total == 0  # the tick never pays
        async with stub_executor(database_url, settings, model) as executor:
            await settle_stubs(executor, database_url)
        done = await svc.tick()
        assert (done.stubs_asked, done.published) == (0, 1)
        assert (await svc.tick()).evaluated == 0
    assert model.total == 1
    [(_, event)] = await outbox_events(database_url)
    assert event.payload.suggested_rule_stub
    [item] = await _stub_items(database_url)
    assert (item["status"], item["attempt"], item["thread_status"]) == ("applied", 1, "complete")
    document = await fetch(
        database_url,
        "SELECT version, content ->> 'rule_stub' AS stub FROM work.documents "
        "WHERE doc_type = 'rule_stub'",
    )
    assert [(d["version"], d["stub"]) for d in document] == [(2, event.payload.suggested_rule_stub)]
    # The read path of before still answers.
    view = await fetch(database_url, "SELECT suggested_rule_stub FROM clusters.rule_stubs")
    assert [v["suggested_rule_stub"] for v in view] == [event.payload.suggested_rule_stub]


async def test_a_failed_call_publishes_without_a_stub_and_the_retry_adds_it(
    database_url: str, settings: Settings
) -> None:
    model = AnsweringSynthesizer(error=TransientError("gateway timed out (test)"), failures=1)
    async with service(database_url) as svc:
        await svc.ingest([failure("f-1"), failure("f-2")])
        await svc.tick()
        async with stub_executor(database_url, settings, model) as executor:
            await executor.sweep_once()
            await executor.drain()  # attempt 1 fails: a retry waits
            assert model.total == 1
            report = await svc.tick()
            assert report.published == 1  # a failed call never holds the signal back
            await settle_stubs(executor, database_url)
        arrived = await svc.tick()
        assert (arrived.stubs_arrived, arrived.published) == (1, 1)
    assert model.total == 2
    events = [e for _, e in await outbox_events(database_url)]
    assert [e.payload.suggested_rule_stub is None for e in events] == [True, False]
    assert events[0].payload.cluster_id == events[1].payload.cluster_id
    [item] = await _stub_items(database_url)
    assert (item["status"], item["attempt"]) == ("applied", 2)


async def test_without_a_wait_the_snapshot_goes_first_and_the_stub_follows(
    database_url: str, settings: Settings
) -> None:
    policy = ClusterPolicy(stub_wait=timedelta(0))
    async with service(database_url, policy=policy) as svc:
        await svc.ingest([failure("f-1")])
        first = await svc.tick()
        assert (first.stubs_asked, first.published) == (1, 1)
        async with stub_executor(database_url, settings, CountingSynthesizer()) as executor:
            await settle_stubs(executor, database_url)
        assert (await svc.tick()).published == 1
    events = [e for _, e in await outbox_events(database_url)]
    assert [e.payload.suggested_rule_stub is None for e in events] == [True, False]


async def test_work_for_a_content_the_cluster_moved_on_from_is_canceled_without_a_call(
    database_url: str, settings: Settings
) -> None:
    model = CountingSynthesizer()
    async with service(database_url) as svc:
        await svc.ingest([failure("f-1")])
        await svc.tick()  # asks for the stub of the first content
        await svc.ingest([failure("f-2")])
        moved = await svc.tick()
        assert (moved.stubs_asked, moved.stubs_superseded) == (1, 1)
        async with stub_executor(database_url, settings, model) as executor:
            await settle_stubs(executor, database_url)
        await svc.tick()
    assert model.total == 1  # only the current content was paid for
    items = await _stub_items(database_url)
    assert [(i["status"], i["attempt"]) for i in items] == [("canceled", 0), ("applied", 1)]
    [(_, event)] = await outbox_events(database_url)
    assert event.payload.failure_count == 2
    assert event.payload.suggested_rule_stub


async def test_stubs_can_be_turned_off(database_url: str) -> None:
    async with service(database_url, policy=ClusterPolicy(generate_stubs=False)) as svc:
        await svc.ingest([failure("f-1")])
        report = await svc.tick()
    assert (report.stubs_asked, report.published) == (0, 1)
    assert await _stub_items(database_url) == []


async def test_a_stub_that_always_fails_is_paid_max_attempts_times_then_given_up(
    database_url: str, settings: Settings
) -> None:
    model = AnsweringSynthesizer(error=TransientError("gateway timed out (test)"))
    async with service(database_url) as svc:
        await svc.ingest([failure("f-1")])
        await svc.tick()
        async with stub_executor(database_url, settings, model, work_max_attempts=3) as executor:
            await settle_stubs(executor, database_url)
        await svc.tick()
        await svc.tick()  # given up: never asked again
    assert model.total == 3
    [item] = await _stub_items(database_url)
    assert (item["status"], item["attempt"], item["thread_status"]) == ("dead_letter", 3, "failed")
    [(_, event)] = await outbox_events(database_url)
    assert event.payload.suggested_rule_stub is None


@pytest.mark.parametrize(
    "content",
    ["not json", "[" * 100_000, json.dumps({"rule_stub": "[" * 100}) + "x", '{"rule_stub": ""}'],
    ids=["not-json", "deep", "trailing", "empty"],
)
async def test_an_unusable_answer_ends_its_item_at_once_and_is_kept(
    database_url: str, settings: Settings, content: str
) -> None:
    model = AnsweringSynthesizer(content)
    async with service(database_url) as svc:
        await svc.ingest([failure("f-1")])
        await svc.tick()
        async with stub_executor(database_url, settings, model) as executor:
            await settle_stubs(executor, database_url)
        await svc.tick()
    assert model.total == 1  # an invalid answer is permanent: never asked again
    [item] = await _stub_items(database_url)
    assert item["status"] == "dead_letter"
    [response] = await fetch(
        database_url,
        "SELECT payload::text AS payload FROM work.ledger_entries WHERE entry_type = 'response'",
    )
    assert response_content(json.loads(response["payload"])) == content  # the paid answer
    [(_, event)] = await outbox_events(database_url)
    assert event.payload.suggested_rule_stub is None


async def test_a_stub_with_nul_and_lone_surrogates_is_published_readable_and_kept_exact(
    database_url: str, settings: Settings
) -> None:
    content = json.dumps({"rule_stub": "WHEN a\x00b THEN \ud800flag"}, ensure_ascii=False)
    async with service(database_url) as svc:
        await svc.ingest([failure("f-1")])
        await svc.tick()
        async with stub_executor(database_url, settings, AnsweringSynthesizer(content)) as ex:
            await settle_stubs(ex, database_url)
        await svc.tick()
    [(_, event)] = await outbox_events(database_url)
    assert event.payload.suggested_rule_stub == "WHEN a\ufffdb THEN \ufffdflag"
    [response] = await fetch(
        database_url,
        "SELECT payload::text AS payload FROM work.ledger_entries WHERE entry_type = 'response'",
    )
    answer = json.loads(response["payload"])
    assert response_content(answer) == content
    assert answer["usage"] == {"t": 1}


def _stub_answers() -> st.SearchStrategy[str]:
    stub = st.one_of(ANY_TEXT, hostile_text())
    as_json = st.builds(
        lambda text, ascii_only: json.dumps({"rule_stub": text}, ensure_ascii=ascii_only),
        stub,
        st.booleans(),
    )
    return st.one_of(as_json, ANSWER_CONTENT)


def test_any_stub_answer_ends_its_item_and_never_a_tick(
    database_url: str, settings: Settings
) -> None:
    """Whatever a stub call answers or raises, its item ends within the attempt limit, the paid
    answer is kept exactly, every cluster goes out, and no tick fails."""
    loop = asyncio.new_event_loop()
    rules = iter(range(1, 10_000))
    errors = [None, TransientError("x\x00"), PermanentError("\ud800"), ValueError("boom")]

    async def one_answer(content: str, error: Exception | None) -> None:
        model = AnsweringSynthesizer(content, error)
        rule_n = next(rules)
        async with service(database_url) as svc:
            await svc.ingest([failure(f"f-{rule_n}", rule_n=rule_n)])
            await svc.tick()
            async with stub_executor(database_url, settings, model, work_max_attempts=2) as ex:
                await settle_stubs(ex, database_url)
            await svc.tick()  # never raises, whatever the answer
        assert model.total <= 2
        rows = await fetch(
            database_url,
            "SELECT e.payload::text AS payload FROM work.ledger_entries e "
            "JOIN work.work_items w USING (work_item_id) "
            "WHERE e.entry_type = 'response' AND w.input ->> 'cluster_id' = ("
            "  SELECT cluster_id::text FROM clusters.clusters WHERE rule_id = $1)",
            rule(rule_n),
        )
        if error is None:  # answered: the paid answer is kept exactly, whatever it holds
            assert [response_content(json.loads(r["payload"])) for r in rows] == [content]

    @hypothesis_settings(
        max_examples=25,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(_stub_answers(), st.sampled_from(errors))
    @example("", None)  # the empty answer is an answer: kept as it is, not generated
    def run(content: str, error: Exception | None) -> None:
        loop.run_until_complete(one_answer(content, error))

    try:
        run()
    finally:
        loop.close()
    live = asyncio.run(
        fetch(
            database_url,
            "SELECT 1 FROM work.work_items WHERE function_key = 'rule_stub' "
            "AND status NOT IN ('applied', 'dead_letter', 'canceled')",
        )
    )
    dirty = asyncio.run(
        fetch(database_url, "SELECT 1 FROM clusters.clusters WHERE revision > evaluated_revision")
    )
    assert not live
    assert not dirty


async def test_replicas_ticking_at_once_ask_once_per_content_and_pay_once(
    database_url: str, settings: Settings
) -> None:
    model = CountingSynthesizer()
    policy = ClusterPolicy(batch_size=4)
    clusters = 24
    async with (
        service(database_url, policy=policy) as r1,
        service(database_url, policy=policy) as r2,
        service(database_url, policy=policy) as r3,
        stub_executor(database_url, settings, model) as executor,
    ):
        replicas = (r1, r2, r3)
        await r1.ingest([failure(f"a-{i}", rule_n=i % clusters, minutes=i) for i in range(96)])

        async def ticks(svc: Any) -> None:
            for _ in range(3):
                await svc.tick()

        await asyncio.gather(*(ticks(r) for r in replicas))
        await settle_stubs(executor, database_url)
        await asyncio.gather(*(ticks(r) for r in replicas))
        assert model.total == clusters
        assert set(model.calls.values()) == {1}
        events = await outbox_events(database_url)
        assert len(events) == clusters
        assert all(e.payload.suggested_rule_stub for _, e in events)
        await r2.ingest([failure(f"b-{i}", rule_n=i, minutes=500 + i) for i in range(10)])
        await asyncio.gather(*(ticks(r) for r in replicas))
        await settle_stubs(executor, database_url)
        await asyncio.gather(*(ticks(r) for r in replicas))
    assert model.total == clusters + 10
    assert len(await outbox_events(database_url)) == clusters + 10
    items = await _stub_items(database_url)
    assert len({i["idempotency_key"] for i in items}) == len(items) == clusters + 10


async def test_other_roles_cannot_reach_the_producer_state(database_url: str) -> None:
    for role in ("spectral_projector", "spectral_operator", "spectral_executor"):
        conn = await asyncpg.connect(database_url, server_settings={"role": role})
        try:
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.fetch("SELECT * FROM clusters.clusters")
        finally:
            await conn.close()


async def test_the_lease_archive_is_read_only_to_the_producer(database_url: str) -> None:
    conn = await asyncpg.connect(database_url, server_settings={"role": "spectral_producer"})
    try:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("UPDATE clusters.rule_stub_leases SET generation_mode = 'failed'")
    finally:
        await conn.close()
