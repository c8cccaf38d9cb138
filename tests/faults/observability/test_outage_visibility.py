"""Every outage visible, and its log bounded: the broker or the database stopped for real under
running deployments (`spectral outbox relay`, `spectral consume rule-candidates`,
`spectral consume work-executor`, each with its metrics port).

* The broker stopped for 60 s under an idle consumer, an idle executor and a relay with a
  pending row: each goes not ready within 30 s (``/readyz`` 503, ``spectral_ready 0``, the
  ``kafka`` check failing), the relay's backlog gauges rise (read on a clock of their own, not
  between batches the producer is retrying), every process is ready again once the broker is
  back and the row is published — and another key's rows in order, the one delayed until after
  the outage and the one written after it sent no earlier than its time. Each process writes a
  bounded number of log lines for the whole outage (at most 20, the client library's ~80 lines a
  second held back), with its start and its end each logged once.
* The database stopped under the same idle deployments: the same, for the ``database`` check.

The servers are private to the test (stopping them disturbs no other test). The alert rules
these metrics feed are tested for the same outages by promtool
(deploy/prometheus/tests/spectral-alerts.test.yaml).
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from spectral.db.migrate import migrate
from spectral.devstack.kafka import LocalKafka
from spectral.devstack.kafka_jars import default_cache_dir
from spectral.devstack.postgres import LocalPostgres
from tests.integration.outbox.relay.support import (
    EVENT_TYPE,
    enqueue_numbered,
    outbox_counts,
    read_topic,
)

pytestmark = [pytest.mark.integration, pytest.mark.faults]

ROOT = Path(__file__).resolve().parents[2]
SPECTRAL = str(Path(sys.executable).with_name("spectral"))

NOT_READY_WITHIN = 30.0
BROKER_OUTAGE = 60.0
DATABASE_OUTAGE = 40.0
MOST_LINES = 20


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Deployment:
    name: str
    args: list[str]
    log: Path
    port: int = field(default_factory=_port)
    process: subprocess.Popen[bytes] | None = None

    def start(self, env: dict[str, str]) -> None:
        # Logs go to a file: a pipe nobody reads fills up and blocks the process mid-write.
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [SPECTRAL, *self.args, "--metrics-port", str(self.port)],
                cwd=ROOT,
                env={**env, "SPECTRAL_LOG_FORMAT": "json"},
                stdout=subprocess.DEVNULL,
                stderr=out,
            )

    def metrics(self) -> dict[str, float]:
        """``name{labels}`` -> value of every sample on the metrics port (empty when it does
        not answer)."""
        try:
            text = httpx.get(f"http://127.0.0.1:{self.port}/metrics", timeout=5).text
        except httpx.HTTPError:
            return {}
        samples: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return samples

    def ready(self) -> bool | None:
        """/readyz's answer (None: no answer at all)."""
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/readyz", timeout=5).status_code == 200
        except httpx.HTTPError:
            return None

    def lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()

    def tail(self) -> str:
        return f"--- {self.name}\n" + "\n".join(self.lines()[-40:])

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _deployments(tmp_path: Path) -> list[Deployment]:
    return [
        Deployment("relay", ["outbox", "relay", "--poll-interval", "0.2"], tmp_path / "relay.log"),
        Deployment("consumer", ["consume", "rule-candidates"], tmp_path / "consumer.log"),
        Deployment("executor", ["consume", "work-executor"], tmp_path / "executor.log"),
    ]


@contextmanager
def running(deployments: list[Deployment], env: dict[str, str]) -> Iterator[None]:
    try:
        for deployment in deployments:
            deployment.start(env)
        yield
    finally:
        for deployment in deployments:
            deployment.stop()


async def _until(what: str, check: Callable[[], bool], timeout: float, tails: str = "") -> float:
    """Seconds until ``check()`` holds; fails after ``timeout``."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"{what} within {timeout:.0f} s\n{tails}")
        await asyncio.sleep(0.5)
    return time.monotonic() - started


def _is_ready(deployment: Deployment) -> bool:
    return deployment.ready() is True


def _tails(deployments: list[Deployment]) -> str:
    return "\n".join(d.tail() for d in deployments)


def _events(lines: list[str], event: str, component: str) -> int:
    count = 0
    for line in lines:
        try:
            parsed = json.loads(line)
        except ValueError:
            continue
        if parsed.get("event") == event and parsed.get("component") == component:
            count += 1
    return count


async def _outage_is_visible_and_its_log_bounded(
    deployments: list[Deployment],
    *,
    component: str,
    stop: Callable[[], None],
    start: Callable[[], object],
    outage: float,
    during: Callable[[], Awaitable[None]] | None = None,
) -> dict[str, float]:
    """Stop a server under the running ``deployments`` for ``outage`` seconds and check what
    they report; returns the seconds each took to go not ready."""
    for deployment in deployments:
        await _until(
            f"{deployment.name} ready",
            partial(_is_ready, deployment),
            120,
            _tails(deployments),
        )
    before = {d.name: len(d.lines()) for d in deployments}
    stop()
    stopped = time.monotonic()
    if during is not None:
        await during()
    not_ready: dict[str, float] = {}
    for deployment in deployments:
        await _until(
            f"{deployment.name} not ready, its {component} check failing",
            partial(_not_ready_for, deployment, component),
            NOT_READY_WITHIN - (time.monotonic() - stopped),
            _tails(deployments),
        )
        not_ready[deployment.name] = round(time.monotonic() - stopped, 1)
    await asyncio.sleep(max(0.0, outage - (time.monotonic() - stopped)))
    start()
    for deployment in deployments:
        await _until(
            f"{deployment.name} ready again",
            partial(_is_ready, deployment),
            120,
            _tails(deployments),
        )
        assert deployment.metrics()["spectral_ready"] == 1
    await asyncio.sleep(3)  # what a process says right after the outage counts too
    counts = {d.name: len(d.lines()) - before[d.name] for d in deployments}
    print(f"{component} outage of {outage:.0f} s, log lines per process: {counts}")  # noqa: T201
    for deployment in deployments:
        lines = deployment.lines()[before[deployment.name] :]
        assert len(lines) <= MOST_LINES, deployment.tail()
        assert _events(lines, "outage started: waiting for the server", component) == 1, (
            deployment.tail()
        )
        assert _events(lines, "outage ended: the server answers again", component) == 1, (
            deployment.tail()
        )
    return not_ready


def _topics(env: dict[str, str]) -> None:
    subprocess.run(
        [SPECTRAL, "topics", "apply"], cwd=ROOT, env=env, check=True, capture_output=True
    )


async def test_a_broker_outage_is_visible_at_once_and_logged_in_a_few_lines(
    spectral_env: dict[str, str], database_url: str, topic_prefix: str, tmp_path: Path
) -> None:
    broker = LocalKafka(tmp_path / "kafka", default_cache_dir(), short_lived=True)
    bootstrap = broker.ensure_running()
    env = {**spectral_env, "SPECTRAL_KAFKA_BOOTSTRAP": bootstrap}
    deployments = _deployments(tmp_path)
    relay = deployments[0]
    try:
        _topics(env)
        with running(deployments, env):
            backlog: list[tuple[float, float]] = []

            key = uuid.uuid4()
            delayed_until = datetime.now(UTC) + timedelta(seconds=BROKER_OUTAGE + 5)

            async def pending_row() -> None:
                # A writer commits during the outage: the relay cannot publish it. Another key's
                # second row is delayed until after the outage: its third waits for it.
                await enqueue_numbered(database_url, [(uuid.uuid4(), 1), (key, 1)])
                await enqueue_numbered(database_url, [(key, 2)], available_at=delayed_until)
                await enqueue_numbered(database_url, [(key, 3)])

            not_ready = await _outage_is_visible_and_its_log_bounded(
                deployments,
                component="kafka",
                stop=broker.stop,
                start=partial(_read_then_start, relay, backlog, broker.start),
                outage=BROKER_OUTAGE,
                during=pending_row,
            )
            # Just before the broker came back, the gauges showed the row, a minute old.
            depth, age = backlog[0]
            assert depth >= 1
            assert age >= BROKER_OUTAGE - NOT_READY_WITHIN, backlog

            async def published() -> bool:
                return (await outbox_counts(database_url))[1] == 0

            deadline = time.monotonic() + 60
            while not await published():
                assert time.monotonic() < deadline, relay.tail()
                await asyncio.sleep(0.5)
            sent = await read_topic(bootstrap, topic_prefix + EVENT_TYPE)
            of_key = [r for r in sent if r.key == str(key)]
            assert [r.seq for r in of_key] == [1, 2, 3]
            not_before = int(delayed_until.timestamp() * 1000)
            assert [r.timestamp_ms >= not_before for r in of_key[1:]] == [True, True]
        print(f"not ready after (s): {not_ready}")  # noqa: T201 - reported by the test run
    finally:
        broker.stop(wipe=True)


def _not_ready_for(deployment: Deployment, component: str) -> bool:
    """/readyz 503, and its metrics say so, naming the server's check."""
    samples = deployment.metrics()
    return (
        deployment.ready() is False
        and samples.get("spectral_ready") == 0
        and samples.get(f'spectral_ready_check{{check="{component}"}}') == 0
    )


def _read_then_start(
    relay: Deployment, backlog: list[tuple[float, float]], start: Callable[[], object]
) -> None:
    backlog.append(_backlog(relay))
    start()


def _backlog(relay: Deployment) -> tuple[float, float]:
    samples = relay.metrics()
    return samples["spectral_outbox_depth"], samples["spectral_outbox_oldest_age_seconds"]


async def test_a_database_outage_under_idle_deployments_is_visible_and_logged_in_a_few_lines(
    spectral_env: dict[str, str], tmp_path: Path
) -> None:
    server = LocalPostgres(tmp_path / "pg")
    url = server.ensure_running()
    env = {**spectral_env, "SPECTRAL_DATABASE_URL": url}
    deployments = _deployments(tmp_path)
    try:
        await migrate(url)
        _topics(env)
        with running(deployments, env):
            not_ready = await _outage_is_visible_and_its_log_bounded(
                deployments,
                component="database",
                stop=server.stop,
                start=server.start,
                outage=DATABASE_OUTAGE,
            )
        print(f"not ready after (s): {not_ready}")  # noqa: T201 - reported by the test run
    finally:
        server.stop(wipe=True)
