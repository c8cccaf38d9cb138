"""Rebalances on the 3-broker cluster under load, for each transport and group protocol: a member
joining, leaving, SIGKILLed, the group's coordinator frozen, a rolling restart (see
tests/cluster/rebalance.py). Each prints its table of stalls (``REBALANCE`` lines); nothing may
be lost or applied twice. The figures are printed, not asserted: the docs' transport page holds
a run's table."""

from __future__ import annotations

from pathlib import Path

import pytest

from spectral.devstack.kafka_cluster import LocalKafkaCluster
from spectral.settings import Settings
from tests.cluster.rebalance import measure_all, rebalance_line, table
from tests.kafka_support import TRANSPORTS

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.cluster]


@pytest.mark.cluster_slow
@pytest.mark.timeout(1200)  # five faults, each waited out, on a busy machine
@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
async def test_rebalances_under_load(  # noqa: PLR0917 - fixtures
    cluster: LocalKafkaCluster,
    settings: Settings,
    database_url: str,
    spectral_env: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    transport: str,
) -> None:
    async with rebalance_line(
        settings, database_url, spectral_env, cluster, transport, tmp_path
    ) as line:
        baseline = line.baseline()
        rows = await measure_all(line)
        with capsys.disabled():  # the measured stalls are the test's output, whatever follows
            print(f"\n{table(transport, rows, baseline)}")  # noqa: T201
        lost, twice = await line.finish()
    with capsys.disabled():
        print(f"REBALANCE {transport}: lost {lost}, applied twice {twice}")  # noqa: T201
    assert (lost, twice) == (0, 0)
