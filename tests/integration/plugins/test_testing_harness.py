"""spectral.testing's Harness in `make test` (its fixtures run in the example's own suite, `make
test-example`): publish through the outbox and the relay, run a deployment until idle, rebuild,
read dead letters."""

from __future__ import annotations

import uuid

import pytest

from contracts import FAILURE_CLUSTER_DETECTED
from spectral.engine.handler import Outcome
from spectral.settings import Settings
from spectral.testing import Harness
from tests.integration.replay.support import fetchval, history_of_clusters

pytestmark = pytest.mark.integration


async def test_the_harness_drives_a_deployment_through_the_real_stack(
    settings: Settings, database_url: str
) -> None:
    harness = Harness(settings)
    events = history_of_clusters([uuid.uuid4(), uuid.uuid4()], 2)

    assert await harness.publish(*events) == len(events)
    assert await harness.publish() == 0  # nothing left to relay

    first = await harness.run_until_idle("rule-candidates", idle=0.5)
    assert first.counts[Outcome.APPLIED] + first.counts[Outcome.STALE] == len(events)
    again = await harness.run_until_idle("rule-candidates", idle=0.5)  # its offsets committed
    assert sum(again.counts.values()) == 0

    rebuilt = await harness.rebuild("rule-candidates")
    assert rebuilt.complete
    assert rebuilt.committed
    assert (
        await fetchval(database_url, "SELECT count(*) FROM platform.rule_candidates_pending") == 2
    )
    assert await harness.dead_letters(FAILURE_CLUSTER_DETECTED) == []
    assert harness.topic(FAILURE_CLUSTER_DETECTED).startswith(settings.topic_prefix)
