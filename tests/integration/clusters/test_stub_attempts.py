"""ADR-0008 for the rule-stub worker: MaxAttempts, capped backoff, the permanent marker and the
failure metrics; and hostile stub answers, which end their own attempt, never a tick — through
the service and through `spectral clusters tick` (and `tick --every`) in a subprocess."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from producers.clusters import ClusterPolicy
from spectral.errors import PermanentError, TransientError
from spectral.llm.answers import response_content
from spectral.llm.seam import SynthesisRequest, SynthesisResponse
from tests.fakes.openai_server import FakeModelServer
from tests.hostile_answers import ANSWER_CONTENT, ANY_TEXT, chat_body, hostile_text
from tests.integration.clusters.support import (
    CountingSynthesizer,
    failure,
    fetch,
    outbox_events,
    rule,
    service,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
SPECTRAL = str(Path(sys.executable).with_name("spectral"))
BASE = timedelta(milliseconds=50)


class AnsweringSynthesizer(CountingSynthesizer):
    """Answers every rule-stub call with ``content`` (or raises ``error``)."""

    def __init__(self, content: str = "", error: Exception | None = None) -> None:
        super().__init__()
        self.content = content
        self.error = error

    async def synthesize(self, request: SynthesisRequest) -> SynthesisResponse:
        self.calls[request.idempotency_key] += 1
        if self.error is not None:
            raise self.error
        return SynthesisResponse(content=self.content, model="stub\x00model", usage={"t": 1})


async def _lease(database_url: str) -> dict[str, Any]:
    (row,) = await fetch(
        database_url,
        "SELECT generation_mode, attempts, last_error, retry_at, generated_at, "
        "response::text AS response FROM clusters.rule_stub_leases",
    )
    return dict(row)


async def _tick_until_quiet(svc: Any, database_url: str, ticks: int = 12) -> None:
    """Tick as time goes by: each round makes every pending lease due (its retry, or stale)."""
    for _ in range(ticks):
        await fetch(
            database_url,
            "UPDATE clusters.rule_stub_leases SET retry_at = retry_at - interval '1 hour', "
            "generated_at = generated_at - interval '1 hour' WHERE generation_mode = 'pending'",
        )
        await svc.tick()


async def test_a_stub_that_always_fails_is_paid_max_attempts_times_then_marked(
    database_url: str,
) -> None:
    broken = CountingSynthesizer(fail=True)
    registry = CollectorRegistry()
    policy = ClusterPolicy(stub_max_attempts=3, stub_retry_base=BASE)
    async with service(database_url, broken, policy=policy, registry=registry) as svc:
        await svc.ingest([failure("f-1")])
        report = await svc.tick()
        lease = await _lease(database_url)
        # The failure is recorded at once, with the backoff of attempt 1 (base * 2^0).
        assert (lease["generation_mode"], lease["attempts"]) == ("pending", 1)
        wait = (lease["retry_at"] - lease["generated_at"]).total_seconds()
        assert wait == pytest.approx(BASE.total_seconds(), abs=0.02)
        assert report.published == 1  # the signal is not held back
        await _tick_until_quiet(svc, database_url)
    # Without the cap this went on forever: one paid call per lease timeout (288 a day).
    assert broken.total == 3
    lease = await _lease(database_url)
    assert (lease["generation_mode"], lease["attempts"]) == ("failed", 3)
    assert lease["last_error"].startswith("max_attempts_exceeded: synthesizer")
    value = registry.get_sample_value
    assert value("spectral_clusters_stub_attempts_total", {"outcome": "transient_failure"}) == 2
    assert value("spectral_clusters_stub_attempts_total", {"outcome": "permanent_failure"}) == 1
    assert value("spectral_clusters_stub_failures_total", {"reason": "synthesizer"}) == 3
    assert value("spectral_clusters_stub_failures_total", {"reason": "max_attempts_exceeded"}) == 1
    assert value("spectral_clusters_stub_duration_seconds_count") == 3
    [(_, event)] = await outbox_events(database_url)  # published once, without a stub
    assert event.payload.suggested_rule_stub is None
    dirty = await fetch(
        database_url, "SELECT 1 FROM clusters.clusters WHERE revision > evaluated_revision"
    )
    assert dirty == []


async def test_the_backoff_doubles_and_is_capped(database_url: str) -> None:
    broken = CountingSynthesizer(fail=True)
    policy = ClusterPolicy(stub_max_attempts=6, stub_retry_base=BASE)
    waits = []
    async with service(database_url, broken, policy=policy) as svc:
        await svc.ingest([failure("f-1")])
        await svc.tick()
        for _ in range(5):
            lease = await _lease(database_url)
            waits.append((lease["retry_at"] - lease["generated_at"]).total_seconds())
            await _tick_until_quiet(svc, database_url, ticks=1)
    base = BASE.total_seconds()
    assert waits == pytest.approx([base, 2 * base, 4 * base, 8 * base, 10 * base], abs=0.02)
    assert broken.total == 6


async def test_a_holder_that_stopped_on_the_last_attempt_is_marked_without_a_call(
    database_url: str,
) -> None:
    synth = CountingSynthesizer()
    registry = CollectorRegistry()
    policy = ClusterPolicy(stub_max_attempts=2, stub_retry_base=BASE)
    async with service(database_url, synth, policy=policy) as svc:
        await svc.ingest([failure("f-1")])
        cluster = (await svc.repository.list_clusters())[0].cluster_id
    # A holder of attempt 2 that vanished mid-call: its outcome is unknown, its attempt used.
    await fetch(
        database_url,
        "INSERT INTO clusters.rule_stub_leases (cluster_id, content_hash, request, holder, "
        "attempts, generated_at) "
        "VALUES ($1, 'h', '{}'::jsonb, 'gone', 2, now() - interval '1 day')",
        cluster,
    )
    async with service(database_url, synth, policy=policy, registry=registry) as svc:
        report = await svc.tick()
    assert synth.total == 1  # for the cluster's current content only, never for 'h'
    assert report.leases_given_up == 1
    modes = await fetch(
        database_url,
        "SELECT content_hash, generation_mode, last_error FROM clusters.rule_stub_leases "
        "WHERE content_hash = 'h'",
    )
    assert [r["generation_mode"] for r in modes] == ["failed"]
    assert "outcome is unknown" in modes[0]["last_error"]
    value = registry.get_sample_value
    assert value("spectral_clusters_stub_failures_total", {"reason": "outcome_unknown"}) == 1


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("not json", "invalid_answer"),
        ("[" * 100_000, "invalid_answer"),
        ('{"rule_stub": ' + "[" * 50_000, "invalid_answer"),
        ('{"rule_stub": ""}', "invalid_answer"),
    ],
    ids=["not-json", "deep", "deep-field", "empty"],
)
async def test_an_unusable_answer_is_marked_at_once_and_kept(
    database_url: str, content: str, why: str
) -> None:
    synth = AnsweringSynthesizer(content)
    async with service(database_url, synth) as svc:
        await svc.ingest([failure("f-1")])
        await _tick_until_quiet(svc, database_url, ticks=3)
    assert synth.total == 1  # permanent: never asked again
    lease = await _lease(database_url)
    assert lease["generation_mode"] == "failed"
    assert lease["last_error"].startswith(why)
    assert response_content(json.loads(lease["response"])) == content  # the paid answer, kept


async def test_a_stub_with_nul_and_lone_surrogates_is_published_readable_and_kept_exact(
    database_url: str,
) -> None:
    content = json.dumps({"rule_stub": "WHEN a\x00b THEN \ud800flag"}, ensure_ascii=False)
    synth = AnsweringSynthesizer(content)
    async with service(database_url, synth) as svc:
        await svc.ingest([failure("f-1")])
        report = await svc.tick()
    assert (report.model_calls, report.model_failures) == (1, 0)
    [(_, event)] = await outbox_events(database_url)
    assert event.payload.suggested_rule_stub == "WHEN a\ufffdb THEN \ufffdflag"
    lease = await _lease(database_url)
    assert lease["generation_mode"] == "llm"
    answer = json.loads(lease["response"])
    assert response_content(answer) == content
    usage = await fetch(
        database_url, "SELECT model, usage::text AS usage FROM clusters.model_usage"
    )
    assert [(r["model"], r["usage"]) for r in usage] == [("stub\\u0000model", '{"t": 1}')]


def _stub_answers() -> st.SearchStrategy[str]:
    stub = st.one_of(ANY_TEXT, hostile_text())
    as_json = st.builds(
        lambda text, ascii_only: json.dumps({"rule_stub": text}, ensure_ascii=ascii_only),
        stub,
        st.booleans(),
    )
    return st.one_of(as_json, ANSWER_CONTENT)


def test_any_stub_answer_ends_its_attempt_and_never_a_tick(database_url: str) -> None:
    loop = asyncio.new_event_loop()
    rules = iter(range(1, 10_000))
    errors = [None, TransientError("x\x00"), PermanentError("\ud800"), ValueError("boom")]

    async def example(content: str, error: Exception | None) -> None:
        synth = AnsweringSynthesizer(content, error)
        rule_n = next(rules)
        policy = ClusterPolicy(stub_max_attempts=2, stub_retry_base=BASE)
        async with service(database_url, synth, policy=policy) as svc:
            await svc.ingest([failure(f"f-{rule_n}", rule_n=rule_n)])
            for _ in range(3):
                await svc.tick()  # never raises, whatever the answer
                await fetch(
                    database_url,
                    "UPDATE clusters.rule_stub_leases SET retry_at = retry_at - interval '1 h' "
                    "WHERE retry_at IS NOT NULL",
                )
        (lease,) = await fetch(
            database_url,
            "SELECT l.generation_mode, l.retry_at, l.response::text AS response "
            "FROM clusters.rule_stub_leases l JOIN clusters.clusters c USING (cluster_id) "
            "WHERE c.rule_id = $1",
            rule(rule_n),
        )
        assert lease["generation_mode"] in ("llm", "failed") or lease["retry_at"] is not None
        assert synth.total <= policy.stub_max_attempts
        if error is None:  # answered: the paid answer is kept exactly, whatever it holds
            assert response_content(json.loads(lease["response"])) == content

    @hypothesis_settings(
        max_examples=30,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(_stub_answers(), st.sampled_from(errors))
    def run(content: str, error: Exception | None) -> None:
        loop.run_until_complete(example(content, error))

    try:
        run()
    finally:
        loop.close()
    assert asyncio.run(_no_pending_without_retry(database_url))


async def _no_pending_without_retry(database_url: str) -> bool:
    """Every lease ended ('llm' or 'failed') or waits for a scheduled retry; none is stranded,
    and every cluster went out."""
    stranded = await fetch(
        database_url,
        "SELECT 1 FROM clusters.rule_stub_leases WHERE generation_mode = 'pending' "
        "AND retry_at IS NULL",
    )
    dirty = await fetch(
        database_url, "SELECT 1 FROM clusters.clusters WHERE revision > evaluated_revision"
    )
    return not stranded and not dirty


# -- the CLI -----------------------------------------------------------------------------------


@pytest.fixture
def nul_gateway() -> Iterator[FakeModelServer]:
    """A gateway answering the stub prompt of failures summarised ``[script:NAME]``."""
    scripts = {
        "nulstub": (200, chat_body(json.dumps({"rule_stub": "WHEN x\x00 THEN flag"}))),
        "deepstub": (200, chat_body("[" * 100_000)),
        "badbody": (200, b"\x00\xff" + b"[" * 100_000),
    }
    with FakeModelServer(scripts=scripts) as server:
        yield server


def _env(spectral_env: dict[str, str], server: FakeModelServer) -> dict[str, str]:
    return {
        **spectral_env,
        "SPECTRAL_SYNTHESIZER": "openai",
        "SPECTRAL_LLM_BASE_URL": server.url,
        "SPECTRAL_LLM_ROUTES": json.dumps({"*": "fake-model"}),
        "SPECTRAL_LLM_TIMEOUT_SECONDS": "10",
    }


def _ingest(env: dict[str, str], *summaries: str) -> None:
    lines = [
        json.dumps(
            {
                "failure_id": f"f-{n}",
                "rule_id": f"00000000-0000-4000-8000-{n:012d}",
                "workspace_id": "5f0c7d1e-0000-4000-8000-000000000001",
                "observed_at": "2026-11-20T08:00:00Z",
                "summary": summary,
            }
        )
        for n, summary in enumerate(summaries, start=1)
    ]
    done = subprocess.run(
        [SPECTRAL, "clusters", "ingest", "-"],
        cwd=ROOT,
        env=env,
        input="\n".join(lines).encode(),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]


async def test_tick_exits_zero_whatever_the_stub_answers(
    spectral_env: dict[str, str], database_url: str, nul_gateway: FakeModelServer
) -> None:
    env = _env(spectral_env, nul_gateway)
    _ingest(env, "a [script:nulstub]", "b [script:deepstub]", "c [script:badbody]")
    for _ in range(2):  # the second tick finds nothing new to ask: still 0
        done = subprocess.run(
            [SPECTRAL, "clusters", "tick"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert len(nul_gateway.snapshot()) == 3
    stubs = sorted(str(e.payload.suggested_rule_stub) for _, e in await outbox_events(database_url))
    assert stubs == ["None", "None", "WHEN x\ufffd THEN flag"]
    modes = await fetch(
        database_url,
        "SELECT generation_mode, count(*) AS n FROM clusters.rule_stub_leases GROUP BY 1",
    )
    assert {r["generation_mode"]: r["n"] for r in modes} == {"llm": 1, "failed": 2}


async def test_tick_every_keeps_running_whatever_the_stub_answers(
    spectral_env: dict[str, str], database_url: str, nul_gateway: FakeModelServer, tmp_path: Path
) -> None:
    env = _env(spectral_env, nul_gateway)
    _ingest(env, "a [script:nulstub]", "b [script:deepstub]")
    log = tmp_path / "tick.log"
    with log.open("ab") as out:
        ticking = subprocess.Popen(
            [SPECTRAL, "clusters", "tick", "--every", "0.2"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        for _ in range(300):
            if len(await outbox_events(database_url)) == 2:
                break
            assert ticking.poll() is None, log.read_text()[-3000:]
            await asyncio.sleep(0.1)
        _ingest(env, "a [script:nulstub]", "b [script:deepstub]", "c [script:nulstub]")
        for _ in range(300):
            if len(await outbox_events(database_url)) == 3:
                break
            assert ticking.poll() is None, log.read_text()[-3000:]
            await asyncio.sleep(0.1)
        assert ticking.poll() is None, log.read_text()[-3000:]
    finally:
        ticking.send_signal(signal.SIGTERM)
        code = ticking.wait(timeout=30)
    assert code == 0, log.read_text()[-3000:]
    assert len(await outbox_events(database_url)) == 3
