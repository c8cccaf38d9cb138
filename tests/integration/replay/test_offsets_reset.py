"""`spectral offsets reset`: refused while the group has members, exact when it has none."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest

from contracts import FAILURE_CLUSTER_DETECTED
from spectral.engine.handler import Outcome
from spectral.kafka.topics import topic_for
from spectral.replay.guard import BeyondHorizonError
from spectral.replay.offsets import GroupBusyError, ResetReport, reset_offsets
from spectral.replay.range import (
    AtOffsets,
    AtTime,
    Beginning,
    Latest,
    PartitionOffset,
    Start,
)
from spectral.settings import Settings
from tests.integration.maintenance.support import forgotten_before
from tests.integration.replay.support import (
    T0,
    endpoints,
    live_member,
    rule_candidates,
    run_live,
    spectral_cli,
)
from tests.kafka_support import (
    cluster_event,
    committed_offsets,
    create_topics,
    publish_envelopes,
)

pytestmark = pytest.mark.integration

CONSUMER = "rule-candidates"
EVENT_TYPES = (FAILURE_CLUSTER_DETECTED,)


async def test_reset_is_refused_while_members_are_active_and_exact_when_none_are(
    settings: Settings, kafka_bootstrap: str, database_url: str, spectral_env: dict[str, str]
) -> None:
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await create_topics(kafka_bootstrap, [topic], partitions=2)
    await publish_envelopes(kafka_bootstrap, topic, [cluster_event() for _ in range(10)])
    first = await run_live(settings, rule_candidates(settings)(""))
    assert first.counts[Outcome.APPLIED] == 10
    ends = await committed_offsets(kafka_bootstrap, settings.topic_prefix + CONSUMER, topic)
    assert sum(v or 0 for v in ends.values()) == 10

    # A live member: the reset is refused and says who is there.
    bootstrap, _ = endpoints(settings)
    async with live_member(settings):
        with pytest.raises(GroupBusyError, match=r"1 active member .*spectral-rule-candidates"):
            await reset_offsets(
                settings,
                bootstrap,
                event_types=EVENT_TYPES,
                group=settings.topic_prefix + CONSUMER,
                target=Beginning(),
                database_url=database_url,
            )
        cli = await asyncio.to_thread(
            spectral_cli,
            spectral_env,
            "offsets",
            "reset",
            "--consumer",
            CONSUMER,
            "--to-earliest",
        )
        assert cli.returncode == 1, cli.stderr
        assert "refusing: group" in cli.stderr
        assert "spectral-rule-candidates" in cli.stderr
    assert await committed_offsets(kafka_bootstrap, settings.topic_prefix + CONSUMER, topic) == ends

    # No members: a dry run shows the change and commits nothing ...
    shown = await reset_offsets(
        settings,
        bootstrap,
        event_types=EVENT_TYPES,
        group=settings.topic_prefix + CONSUMER,
        target=AtOffsets((PartitionOffset(None, 0, 1),)),
        database_url=database_url,
        dry_run=True,
    )
    assert [(c.partition, c.before, c.after) for c in shown.changes] == [(0, ends[0], 1)]
    assert await committed_offsets(kafka_bootstrap, settings.topic_prefix + CONSUMER, topic) == ends

    # ... a real one commits exactly the offsets named (partition 1 untouched).
    await reset_offsets(
        settings,
        bootstrap,
        event_types=EVENT_TYPES,
        group=settings.topic_prefix + CONSUMER,
        target=AtOffsets((PartitionOffset(None, 0, 1),)),
        database_url=database_url,
    )
    assert await committed_offsets(kafka_bootstrap, settings.topic_prefix + CONSUMER, topic) == {
        0: 1,
        1: ends[1],
    }
    # The group resumes there: the re-read records are deduplicated, nothing applies twice.
    again = await run_live(settings, rule_candidates(settings)(""))
    assert again.counts[Outcome.DEDUPLICATED] == (ends[0] or 0) - 1
    assert again.counts[Outcome.APPLIED] == 0

    # Timestamps, earliest and latest, through the CLI.
    cli = await asyncio.to_thread(
        spectral_cli,
        spectral_env,
        "offsets",
        "reset",
        CONSUMER,
        "--to-earliest",
        "--json",
    )
    assert cli.returncode == 0, cli.stderr
    assert {c["after"] for c in json.loads(cli.stdout)["changes"]} == {0}
    assert await committed_offsets(kafka_bootstrap, settings.topic_prefix + CONSUMER, topic) == {
        0: 0,
        1: 0,
    }
    future = AtTime(T0 + timedelta(days=36500))
    await reset_offsets(
        settings,
        bootstrap,
        event_types=EVENT_TYPES,
        group=settings.topic_prefix + CONSUMER,
        target=future,
        database_url=database_url,
    )
    assert await committed_offsets(kafka_bootstrap, settings.topic_prefix + CONSUMER, topic) == ends
    await reset_offsets(
        settings,
        bootstrap,
        event_types=EVENT_TYPES,
        group=settings.topic_prefix + CONSUMER,
        target=Beginning(),
        database_url=database_url,
    )
    await reset_offsets(
        settings,
        bootstrap,
        event_types=EVENT_TYPES,
        group=settings.topic_prefix + CONSUMER,
        target=Latest(),
        database_url=database_url,
    )
    assert await committed_offsets(kafka_bootstrap, settings.topic_prefix + CONSUMER, topic) == ends


async def test_a_reset_reading_again_behind_the_horizon_is_refused_unless_told_otherwise(
    settings: Settings, kafka_bootstrap: str, database_url: str, spectral_env: dict[str, str]
) -> None:
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await create_topics(kafka_bootstrap, [topic], partitions=1)
    await publish_envelopes(kafka_bootstrap, topic, [cluster_event() for _ in range(4)])
    await run_live(settings, rule_candidates(settings)(""))
    group = settings.topic_prefix + CONSUMER
    ends = await committed_offsets(kafka_bootstrap, group, topic)
    horizon = datetime.now(UTC) + timedelta(seconds=1)
    await forgotten_before(database_url, horizon)
    bootstrap, _ = endpoints(settings)

    async def reset(
        target: Start, *, dry_run: bool = False, beyond_horizon: bool = False
    ) -> ResetReport:
        return await reset_offsets(
            settings,
            bootstrap,
            event_types=EVENT_TYPES,
            group=group,
            target=target,
            database_url=database_url,
            dry_run=dry_run,
            beyond_horizon=beyond_horizon,
        )

    # Forward (nothing read again) and to the end are not guarded.
    assert (await reset(Latest())).beyond_horizon is None
    with pytest.raises(BeyondHorizonError, match="behind the dedup horizon"):
        await reset(Beginning())
    assert await committed_offsets(kafka_bootstrap, group, topic) == ends
    dry = await reset(Beginning(), dry_run=True)
    assert dry.beyond_horizon is not None
    assert not dry.committed
    refused = await asyncio.to_thread(
        spectral_cli, spectral_env, "offsets", "reset", "--consumer", CONSUMER, "--to-earliest"
    )
    assert refused.returncode == 1, refused.stderr
    assert "--beyond-horizon" in refused.stderr
    assert await committed_offsets(kafka_bootstrap, group, topic) == ends
    forced = await reset(Beginning(), beyond_horizon=True)
    assert forced.committed
    assert await committed_offsets(kafka_bootstrap, group, topic) == {0: 0}


def test_reset_options_are_checked(spectral_env: dict[str, str]) -> None:
    both = spectral_cli(spectral_env, "offsets", "reset", CONSUMER, "--to-earliest", "--to-latest")
    assert both.returncode == 2
    assert "exactly one of" in both.stderr
    bad = spectral_cli(spectral_env, "offsets", "reset", CONSUMER, "--to-offset", "x")
    assert bad.returncode == 2
    assert "PARTITION:OFFSET" in bad.stderr
