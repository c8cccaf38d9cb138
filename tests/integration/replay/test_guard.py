"""A replay that reaches records older than the dedup horizon is refused (a dry run warns); one
that starts at the horizon, or is told --beyond-horizon, runs."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from contracts import FAILURE_CLUSTER_DETECTED
from spectral.engine.handler import Outcome
from spectral.kafka.topics import dlq_topic, topic_for
from spectral.replay.guard import BeyondHorizonError, beyond
from spectral.replay.range import AtTime, Beginning, PartitionRange
from spectral.replay.replay import Mode, ReplayRequest
from spectral.settings import Settings
from tests.integration.maintenance.support import forgotten_before
from tests.integration.replay.support import (
    history_of_clusters,
    rule_candidates,
    run_live,
    run_replay,
    spectral_cli,
)
from tests.kafka_support import create_topics, publish_envelopes

pytestmark = pytest.mark.integration


def test_a_range_reaches_behind_the_horizon_when_it_starts_before_the_first_newer_record() -> None:
    ranges = [
        PartitionRange("t", 0, 0, 10),
        PartitionRange("t", 1, 5, 10),
        PartitionRange("t", 2, 3, 3),  # empty
        PartitionRange("t", 3, 0, 4),
    ]
    firsts = {("t", 0): 2, ("t", 1): 5, ("t", 2): 0, ("t", 3): None}
    assert [r.partition for r in beyond(ranges, firsts)] == [0, 3]


async def test_a_replay_reaching_behind_the_horizon_is_refused_unless_told_otherwise(
    settings: Settings, kafka_bootstrap: str, database_url: str, spectral_env: dict[str, str]
) -> None:
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await create_topics(kafka_bootstrap, [topic, dlq_topic(topic)], partitions=2)
    events = history_of_clusters([uuid.uuid4() for _ in range(4)], versions=2)
    await publish_envelopes(kafka_bootstrap, topic, events)
    live = await run_live(settings, rule_candidates(settings)(""))
    assert live.counts[Outcome.APPLIED] + live.counts[Outcome.STALE] == len(events)
    horizon = datetime.now(UTC) + timedelta(seconds=1)
    await forgotten_before(database_url, horizon)

    with pytest.raises(BeyondHorizonError, match="behind the dedup horizon"):
        await run_replay(settings, rule_candidates(settings), ReplayRequest(Beginning()))
    # A dry run changes nothing: it warns and runs.
    dry = await run_replay(
        settings, rule_candidates(settings), ReplayRequest(Beginning(), mode=Mode.DRY_RUN)
    )
    assert dry.complete
    # From the horizon on there is nothing to refuse (and here nothing to replay).
    later = await run_replay(settings, rule_candidates(settings), ReplayRequest(AtTime(horizon)))
    assert later.records == 0
    forced = await run_replay(
        settings, rule_candidates(settings), ReplayRequest(Beginning(), beyond_horizon=True)
    )
    assert forced.complete
    assert forced.records == len(events)

    refused = spectral_cli(spectral_env, "replay", "rule-candidates", "--from-beginning")
    assert refused.returncode == 1
    assert "behind the dedup horizon" in refused.stderr
    assert "--beyond-horizon" in refused.stderr
