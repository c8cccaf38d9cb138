"""`spectral replay` over the rule-candidates projection, on the real broker and database."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections.abc import Sequence
from datetime import timedelta

import asyncpg
import pytest

from contracts import FAILURE_CLUSTER_DETECTED
from spectral.engine.handler import Delivery, Handler, HandlerResult, Outcome
from spectral.kafka.topics import dlq_topic, topic_for
from spectral.replay.range import AtOffsets, AtTime, Beginning, PartitionOffset
from spectral.replay.replay import Mode, ReplayRequest
from spectral.settings import Settings
from tests.integration.replay.support import (
    T0,
    execute,
    fetchval,
    handled,
    history_of_clusters,
    projection,
    rule_candidates,
    run_live,
    run_replay,
    spectral_cli,
)
from tests.kafka_support import (
    cluster_event,
    committed_offsets,
    create_topics,
    end_offsets,
    publish,
    publish_envelopes,
    read_all,
)
from tests.support import no_task_left_since

pytestmark = pytest.mark.integration

CONSUMER = "rule-candidates"


async def _up_to_date(settings: Settings, kafka_bootstrap: str, partitions: int = 3) -> int:
    """Five snapshots of each of 12 clusters, applied by the live consumer. Returns the count."""
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await create_topics(kafka_bootstrap, [topic, dlq_topic(topic)], partitions=partitions)
    events = history_of_clusters([uuid.uuid4() for _ in range(12)], versions=5)
    await publish_envelopes(kafka_bootstrap, topic, events)
    summary = await run_live(settings, rule_candidates(settings)(""))
    assert summary.counts[Outcome.APPLIED] + summary.counts[Outcome.STALE] == len(events)
    return len(events)


async def test_replay_from_the_beginning_over_an_up_to_date_projection_changes_nothing(
    settings: Settings, kafka_bootstrap: str, database_url: str
) -> None:
    total = await _up_to_date(settings, kafka_bootstrap)
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    before = await projection(database_url)
    handled_before = await handled(database_url, CONSUMER)
    live_offsets = await committed_offsets(kafka_bootstrap, settings.topic_prefix + CONSUMER, topic)

    report = await run_replay(settings, rule_candidates(settings), ReplayRequest(Beginning()))

    assert report.complete
    assert report.records == total
    assert report.counts[Outcome.DEDUPLICATED] == total
    assert report.counts[Outcome.APPLIED] == report.counts[Outcome.STALE] == 0
    assert await projection(database_url) == before
    assert await handled(database_url, CONSUMER) == handled_before
    # The live group's offsets are untouched (the replay has no group at all).
    assert (
        await committed_offsets(kafka_bootstrap, settings.topic_prefix + CONSUMER, topic)
        == live_offsets
    )
    assert await read_all(kafka_bootstrap, dlq_topic(topic)) == []


async def test_replay_after_emptying_the_dedup_record_leaves_the_projection_identical(
    settings: Settings, kafka_bootstrap: str, database_url: str
) -> None:
    total = await _up_to_date(settings, kafka_bootstrap)
    before = await projection(database_url)
    keys_before = [key for key, _ in await handled(database_url, CONSUMER)]
    await execute(database_url, "DELETE FROM core.event_handled WHERE consumer = $1", CONSUMER)

    report = await run_replay(settings, rule_candidates(settings), ReplayRequest(Beginning()))

    # Every snapshot is at most as new as the stored one: the stale guard keeps every row as is.
    assert report.counts[Outcome.STALE] == total
    assert report.counts[Outcome.APPLIED] == 0
    assert await projection(database_url) == before
    after = await handled(database_url, CONSUMER)
    assert [key for key, _ in after] == keys_before
    assert {outcome for _, outcome in after} == {"stale"}


async def test_a_dry_run_reports_what_would_change_and_changes_nothing(
    settings: Settings, kafka_bootstrap: str, database_url: str
) -> None:
    await _up_to_date(settings, kafka_bootstrap, partitions=1)
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    # Published while the live consumer is down: one newer snapshot of a known cluster, one new
    # cluster, one poison record.
    known = await fetchval(
        database_url, "SELECT cluster_id FROM platform.rule_candidates_pending LIMIT 1"
    )
    newer = cluster_event(known, failure_count=50, last_observed_at=T0 + timedelta(days=1))
    fresh = cluster_event(last_observed_at=T0)
    await publish_envelopes(kafka_bootstrap, topic, [newer, fresh])
    await publish(kafka_bootstrap, topic, [(b"k", b"{broken")])
    before = await projection(database_url)
    handled_before = await handled(database_url, CONSUMER)
    dlq_before = await read_all(kafka_bootstrap, dlq_topic(topic))

    report = await run_replay(
        settings, rule_candidates(settings), ReplayRequest(Beginning(), mode=Mode.DRY_RUN)
    )

    assert report.complete
    assert not report.committed
    assert report.counts[Outcome.APPLIED] == 2
    assert report.counts[Outcome.DEAD_LETTERED] == 1
    assert report.dead_letter_reasons == {"not_json": 1}
    assert [n.reason for n in report.dead_letters] == ["not_json"]
    changes = {c.table: c for c in report.changes}
    assert changes["platform.rule_candidates_pending"].inserted == 1
    assert changes["platform.rule_candidates_pending"].updated == 1
    assert changes["core.event_handled"].inserted == 2
    assert changes["core.event_handled"].deleted == 0
    # ... and nothing changed: not the projection, not the dedup record, not the DLQ.
    assert await projection(database_url) == before
    assert await handled(database_url, CONSUMER) == handled_before
    assert await read_all(kafka_bootstrap, dlq_topic(topic)) == dlq_before

    # The same range applied for real does what the dry run said.
    applied = await run_replay(settings, rule_candidates(settings), ReplayRequest(Beginning()))
    assert applied.counts[Outcome.APPLIED] == 2
    assert await projection(database_url) != before
    assert len(await read_all(kafka_bootstrap, dlq_topic(topic))) == len(dlq_before) + 1


class ExplodingHandler(Handler[None]):
    """Writes one row per delivery, then fails the whole statement if any snapshot's stub is
    "explode" (a data error): the engine retries the batch one delivery at a time."""

    name = "replay-test"
    event_types = (FAILURE_CLUSTER_DETECTED,)

    async def apply(
        self, conn: asyncpg.Connection, deliveries: Sequence[Delivery]
    ) -> HandlerResult[None]:
        await conn.execute(
            "INSERT INTO replay_effects SELECT unnest($1::text[])",
            [d.idempotency_key for d in deliveries],
        )
        if any(d.envelope.payload.suggested_rule_stub == "explode" for d in deliveries):
            await conn.execute("SELECT 1 / 0")
        return HandlerResult()


async def test_a_dry_run_counts_only_the_batches_it_keeps(
    settings: Settings, kafka_bootstrap: str, database_url: str
) -> None:
    """The failed batch attempt wrote rows before it failed; pg_stat_xact_user_tables counts
    them even though its savepoint rolled back. The report counts kept batches only."""
    await execute(database_url, "CREATE TABLE replay_effects (idempotency_key text)")
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await create_topics(kafka_bootstrap, [topic, dlq_topic(topic)], partitions=1)
    events = [cluster_event(), cluster_event(), cluster_event(stub="explode"), cluster_event()]
    await publish_envelopes(kafka_bootstrap, topic, events)

    report = await run_replay(
        settings, lambda _url: ExplodingHandler(), ReplayRequest(Beginning(), mode=Mode.DRY_RUN)
    )

    assert report.counts[Outcome.APPLIED] == 3
    assert report.dead_letter_reasons == {"handler_error": 1}
    changes = {c.table: c for c in report.changes}
    assert changes["public.replay_effects"].inserted == 3
    assert changes["core.event_handled"].inserted == 3
    assert await fetchval(database_url, "SELECT count(*) FROM replay_effects") == 0
    assert await read_all(kafka_bootstrap, dlq_topic(topic)) == []


async def test_ranges_by_offset_and_timestamp_stop_where_asked(
    settings: Settings, kafka_bootstrap: str, database_url: str
) -> None:
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await create_topics(kafka_bootstrap, [topic], partitions=1)
    await publish_envelopes(kafka_bootstrap, topic, [cluster_event() for _ in range(10)])
    report = await run_replay(
        settings,
        rule_candidates(settings),
        ReplayRequest(
            AtOffsets((PartitionOffset(None, 0, 2),)),
            AtOffsets((PartitionOffset(None, 0, 6),)),
            mode=Mode.DRY_RUN,
        ),
    )
    assert report.records == 4
    assert [(r.start, r.end) for r in report.ranges] == [(2, 6)]

    # Timestamps: a start after every record's timestamp replays nothing; one before all of
    # them replays everything (up to the end captured at the start).
    records = await read_all(kafka_bootstrap, topic)
    assert len(records) == 10
    later = await run_replay(
        settings,
        rule_candidates(settings),
        ReplayRequest(AtTime(T0 + timedelta(days=3650)), mode=Mode.DRY_RUN),
    )
    assert later.records == 0
    assert later.complete
    everything = await run_replay(
        settings, rule_candidates(settings), ReplayRequest(AtTime(T0 - timedelta(days=3650)))
    )
    assert everything.records == 10
    assert everything.counts[Outcome.APPLIED] == 10
    assert await end_offsets(kafka_bootstrap, topic) == {0: 10}


async def test_a_replay_that_finds_nothing_leaves_no_kafka_client_running(
    settings: Settings, kafka_bootstrap: str, database_url: str
) -> None:
    # A range that starts after every record: the replay's consumer is stopped right after it
    # started. It must stop whole (fetcher, connections, metadata task), not go on running in
    # the process that asked for the replay.
    topic = topic_for(FAILURE_CLUSTER_DETECTED, settings.topic_prefix)
    await create_topics(kafka_bootstrap, [topic], partitions=1)
    await publish_envelopes(kafka_bootstrap, topic, [cluster_event() for _ in range(2)])
    before = set(asyncio.all_tasks())
    report = await run_replay(
        settings,
        rule_candidates(settings),
        ReplayRequest(AtTime(T0 + timedelta(days=3650)), mode=Mode.DRY_RUN),
    )
    assert report.records == 0

    await no_task_left_since(before, timeout=5)


async def test_the_cli_reports_in_json_and_in_tables(
    settings: Settings, kafka_bootstrap: str, database_url: str, spectral_env: dict[str, str]
) -> None:
    total = await _up_to_date(settings, kafka_bootstrap, partitions=2)
    before = await projection(database_url)

    async def run(*args: str) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(spectral_cli, spectral_env, "replay", *args)

    # The spelling of the deployment before `replay NAME` still works, with a warning.
    dry = await run("--consumer", CONSUMER, "--from-beginning", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert (
        f"--consumer is deprecated and goes in the next release; write `spectral replay {CONSUMER}`"
        in dry.stderr
    )
    summary = json.loads(dry.stdout)
    assert summary["mode"] == "dry_run"
    assert summary["complete"] is True
    assert summary["committed"] is False
    assert summary["deduplicated"] == summary["records"] == total
    assert summary["changes"] == []
    assert sum(r["end"] - r["start"] for r in summary["ranges"]) == total

    partial = await run(CONSUMER, "--from-offset", "0:0", "--to-offset", "0:3")
    assert partial.returncode == 0, partial.stderr
    assert "replayed: 3 of at most 3 records, complete" in partial.stdout
    assert "deduplicated" in partial.stdout
    assert await projection(database_url) == before

    for bad, message in (
        (("--from-beginning", "--from-offset", "0:1"), "exactly one start"),
        (("--from-timestamp", "yesterday"), "RFC 3339"),
        (("--from-offset", "9:0"), "no partition 9"),
        (
            ("--from-timestamp", "2026-03-02T00:00:00Z", "--to-timestamp", "2026-03-01T00:00:00Z"),
            "later than",
        ),
    ):
        refused = await run(CONSUMER, *bad)
        assert refused.returncode == 2, refused.stderr
        assert message in refused.stderr
    unknown = await run("nope", "--from-beginning")
    assert unknown.returncode == 2
    assert "no consumer deployment named 'nope'" in unknown.stderr
