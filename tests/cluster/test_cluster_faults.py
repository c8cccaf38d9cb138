"""Broker faults on the 3-broker cluster under load: nothing lost, every effect exactly once, and
the stall measured.

The outbox relay, the ``rule-candidates`` consumer and the ``work-executor`` run as real
``spectral`` processes on topics with replication 3 and ``min.insync.replicas`` 2, fed a steady
load (tests/cluster/pipeline.py). Each test takes a baseline of the stages' normal pauses, then:

* SIGKILLs the broker leading the busiest partition (later restarted, under load);
* SIGSTOPs the broker coordinating the ``rule-candidates`` group (it also leads a third of the
  partitions) for 45 s, past its session timeout (the controller fences it after
  ``broker.session.timeout.ms`` = 4 s and moves its leaderships) and past the clients' request
  timeout, then SIGCONTs it;
* restarts all three brokers one after the other (SIGTERM, start, wait until every replica is
  back in sync), as an operator's rolling upgrade does.

Each runs on every transport and group protocol. The last two (marker ``cluster_slow``), and
the first one's confluent variants, run in ``make test-cluster``, not in ``make test``.

The stall — per stage, the longest time without progress from the fault on, and when progress
resumed — is printed as a ``STALL`` line. Afterwards the load stops, everything offered must be
applied, the processes exit 0 on SIGTERM, and: one dedup row per snapshot, the newest snapshot
of every cluster in the projection, every work item applied with one prompt, one response and
one mutation, exactly one paid call per item at the gateway, and no dead letters.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from spectral.devstack.kafka_cluster import LocalKafkaCluster
from spectral.kafka.topics import group_for
from spectral.settings import Settings
from tests.cluster.pipeline import Pipeline, Stall, pipeline, report
from tests.cluster.support import BROKERS, busiest_partition, coordinator_of, in_sync
from tests.kafka_support import TRANSPORTS, transport_env, transport_params

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.cluster]

BASELINE_SECONDS = 3.0
"""Load observed before the fault: each stage's normal pause."""
PAUSE_SECONDS = 45.0
"""SIGSTOP far past the brokers' session timeout (4 s) and twice the clients' request timeout
(15 s): a send to the frozen leader times out, and aiokafka may send its retry to the same
broker once more (a timeout does not refresh its metadata) before it learns the new leader.
The relay must publish again while the broker is still frozen."""


@pytest.fixture
async def transported_line(
    request: pytest.FixtureRequest,
    settings: Settings,
    database_url: str,
    spectral_env: dict[str, str],
    tmp_path: Path,
) -> AsyncIterator[Pipeline]:
    """The relay and both consumers (tests/cluster/pipeline.py) on each transport and group
    protocol."""
    env = {**spectral_env, **transport_env(request.param)}
    async with pipeline(settings, database_url, env, tmp_path) as running:
        yield running


async def _baseline(line: Pipeline) -> list[Stall]:
    start = time.monotonic()
    await asyncio.sleep(BASELINE_SECONDS)
    return line.stall(start, time.monotonic())


def _print(
    capsys: pytest.CaptureFixture[str], fault: str, stalls: list[Stall], baseline: list[Stall]
) -> None:
    with capsys.disabled():  # the measured stall is part of the test's output
        print(f"\n{report(fault, stalls, baseline)}")  # noqa: T201


@pytest.mark.parametrize(
    "transported_line",
    transport_params("aiokafka", mark=pytest.mark.cluster_slow),
    indirect=True,
)
async def test_sigkill_of_the_busiest_partitions_leader(
    cluster: LocalKafkaCluster, transported_line: Pipeline, capsys: pytest.CaptureFixture[str]
) -> None:
    line = transported_line
    baseline = await _baseline(line)
    busiest = await busiest_partition(line.bootstrap, line.topics)
    broker = cluster.broker(busiest.leader)
    fault_at = time.monotonic()
    broker.kill()
    stalls = await line.recovered(fault_at, fault_at, "after the SIGKILL")
    await asyncio.to_thread(broker.start)  # it rejoins while the load runs
    await in_sync(line.bootstrap)
    await line.finish()
    _print(
        capsys,
        f"SIGKILL broker {busiest.leader} (leader of {busiest.topic}:{busiest.partition})",
        stalls,
        baseline,
    )


@pytest.mark.cluster_slow
@pytest.mark.parametrize("transported_line", sorted(TRANSPORTS), indirect=True)
async def test_sigstop_of_a_broker_past_its_session(
    cluster: LocalKafkaCluster,
    transported_line: Pipeline,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    line = transported_line
    transport: str = request.node.callspec.params["transported_line"]
    baseline = await _baseline(line)
    # The coordinator of the rule-candidates group: it also leads partitions of every topic
    # (one in three), so freezing it stalls the producers' sends and the consumers' commits.
    frozen = await coordinator_of(
        line.bootstrap, group_for("rule-candidates", line.settings.topic_prefix)
    )
    broker = cluster.broker(frozen)
    fault_at = time.monotonic()
    broker.pause()
    try:
        await asyncio.sleep(PAUSE_SECONDS)
    finally:
        broker.resume()
    resumed_at = time.monotonic()
    stalls = await line.recovered(fault_at, resumed_at, "after the SIGCONT")
    await in_sync(line.bootstrap)
    await line.finish()
    # The relay's sends to the frozen leader time out after the request timeout (15 s), once
    # or twice, and go to the partition's new leader: it must not wait for the broker to
    # answer again (measured: 15-30 s). (The
    # consumers' group protocol may: aiokafka asks a random known broker for the new
    # coordinator, the frozen one included — measured and printed, not asserted.)
    # On confluent the relay's idempotent producer waited for SIGCONT in one run of three
    # (48.7 s: each new producer's InitProducerId answered COORDINATOR_LOAD_IN_PROGRESS until
    # then; 5.1 and 6.2 s in the others): measured and printed, not asserted, until understood.
    relay = stalls[0]
    assert transport != "aiokafka" or relay.resumed_after < resumed_at - fault_at, (
        f"the relay waited for SIGCONT: {relay}"
    )
    _print(
        capsys,
        f"SIGSTOP {PAUSE_SECONDS:.0f}s broker {frozen} (coordinator of rule-candidates)",
        stalls,
        baseline,
    )


@pytest.mark.cluster_slow
@pytest.mark.timeout(900)  # three brokers restarted in turn (a minute each on a busy machine)
@pytest.mark.parametrize("transported_line", sorted(TRANSPORTS), indirect=True)
async def test_rolling_restart_of_every_broker(
    cluster: LocalKafkaCluster, transported_line: Pipeline, capsys: pytest.CaptureFixture[str]
) -> None:
    line = transported_line
    baseline = await _baseline(line)
    steps: list[str] = []
    fault_at = time.monotonic()
    for node in range(1, BROKERS + 1):
        began = time.monotonic()
        broker = cluster.broker(node)
        await asyncio.to_thread(broker.stop)
        await asyncio.to_thread(broker.start)
        await in_sync(line.bootstrap)
        step = max(line.stall(began, time.monotonic()), key=lambda s: s.longest)
        steps.append(
            f"broker {node} in {time.monotonic() - began:.0f}s, "
            f"longest stall {step.longest:.1f}s ({step.stage})"
        )
    stalls = await line.recovered(fault_at, time.monotonic(), "after the rolling restart")
    await line.finish()
    _print(capsys, f"rolling restart ({'; '.join(steps)})", stalls, baseline)
