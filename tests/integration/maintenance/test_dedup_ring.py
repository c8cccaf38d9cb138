"""The dedup record as a ring of two slots, against the real database: a key stays unique across
both generations, a rotation never lets one key be claimed twice, forgetting happens only behind
the cutoff."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import asyncpg
import pytest

from spectral.faults import is_transient
from spectral.maintenance.policy import DedupRotation, Hold
from spectral.maintenance.repository import LockTimeoutError
from spectral.settings import Settings
from tests.integration.maintenance.support import (
    age,
    claim,
    claim_in_flight,
    first_rotation,
    generations,
    run_maintenance,
    session,
)
from tests.kafka_support import create_topics

pytestmark = pytest.mark.integration

DAY = timedelta(days=1)


async def test_a_key_stays_deduplicated_across_a_rotation_and_is_forgotten_only_behind_the_cutoff(
    settings: Settings, database_url: str
) -> None:
    assert await claim(database_url, ["k1", "k2"]) == {"k1", "k2"}
    first = await run_maintenance(settings)
    assert first.dedup.hold is Hold.NONE
    assert first.dedup.forgotten_generation is None  # nothing to forget yet
    assert first.dedup.started == 2
    # k1 lives in the previous slot now; k3 is new, in the current one.
    assert await claim(database_url, ["k1", "k3"]) == {"k3"}
    assert await claim(database_url, ["k1", "k2", "k3"]) == set()

    # Days pass. Generation 1 may be forgotten once the outbox generation that was current when
    # generation 2 began (and could still send copies of rows whose keys are in generation 1)
    # has ended, been found fully published, and stayed so for the records' lifetime.
    holds = []
    for _ in range(3):
        holds.append((await run_maintenance(settings)).dedup.hold)
        await age(database_url, 2 * DAY)
    assert holds == [Hold.OUTBOX] * 3
    forgot = await run_maintenance(settings)
    assert forgot.dedup.hold is Hold.NONE
    assert forgot.dedup.forgotten_generation == 1
    assert forgot.dedup.consumers == ["rule-candidates"]
    # Keys of generation 1 are gone; k3 (generation 2, now the previous one) is still known.
    assert await claim(database_url, ["k1", "k2", "k3"]) == {"k1", "k2"}
    rows = await generations(database_url)
    assert [(r["generation"], r["slot"]) for r in rows] == [(1, 0), (2, 1), (3, 0)]
    assert rows[0]["forgotten_at"] is not None
    assert rows[0]["copies_before"] == rows[0]["forgotten_at"] - timedelta(
        seconds=forgot.dedup.lifetime_seconds or 0
    )


async def test_a_recent_redrive_holds_the_dedup_record_back_while_its_copy_may_be_read(
    settings: Settings, database_url: str, kafka_bootstrap: str
) -> None:
    source = f"{settings.topic_prefix}platform.failure_cluster.detected"
    dlq = f"{source}.dlq"
    # Records of the source are readable for minutes; dead letters for the broker's default week.
    short = {"retention.ms": "60000", "segment.ms": "60000", "message.timestamp.after.max.ms": "0"}
    await create_topics(kafka_bootstrap, [source], configs=short)
    await create_topics(kafka_bootstrap, [dlq])
    await claim(database_url, ["k1"])
    await run_maintenance(settings)
    for _ in range(3):
        await run_maintenance(settings)
        await age(database_url, 2 * DAY)
    async with session(database_url) as admin:
        await admin.execute(
            "INSERT INTO core.dlq_redrives (dlq_topic, dlq_partition, dlq_offset, reason, "
            "source_topic, redriven_at) "
            "VALUES ($1, 0, 0, 'handler_error', $2, now() - $3::interval)",
            dlq,
            source,
            timedelta(minutes=5),
        )
    held = await run_maintenance(settings)
    assert held.dedup.hold is Hold.REDRIVE
    assert held.dedup.lifetime_seconds is not None
    assert held.dedup.lifetime_seconds < 3600  # the source's records: minutes, not days
    assert await claim(database_url, ["k1"]) == set()
    await age(database_url, 30 * DAY)  # the redriven copy can no longer be read
    async with session(database_url) as admin:
        await admin.execute(
            "UPDATE core.dlq_redrives SET redriven_at = redriven_at - $1::interval", 30 * DAY
        )
    forgot = await run_maintenance(settings)
    assert forgot.dedup.forgotten_generation == 1


async def test_a_rotation_waits_for_a_claim_in_flight_and_the_key_is_never_claimed_twice(
    database_url: str,
) -> None:
    repo, rotation = await first_rotation(database_url)
    async with claim_in_flight(database_url, ["k"]) as transaction:  # uncommitted, in slot 0
        rotating = asyncio.create_task(repo.rotate_dedup(rotation, timedelta(seconds=30)))
        await asyncio.sleep(0.5)
        assert not rotating.done()  # waits for the claim's transaction
        second = asyncio.create_task(claim(database_url, ["k", "other"]))
        await asyncio.sleep(0.5)
        assert not second.done()  # queued behind the rotation
        await transaction.commit()
    await asyncio.wait_for(rotating, 30)
    # The second claim ran after the rotation, in slot 1, and found k in slot 0.
    assert await asyncio.wait_for(second, 30) == {"other"}
    await repo.close()
    async with session(database_url) as conn:
        slots = await conn.fetchval(
            "SELECT array_agg(slot) FROM core.event_handled_keys WHERE idempotency_key = 'k'"
        )
    assert slots == [0]


async def test_a_rotation_gives_up_after_the_lock_timeout_and_changes_nothing(
    database_url: str,
) -> None:
    repo, rotation = await first_rotation(database_url)
    async with claim_in_flight(database_url, ["k"]) as transaction:
        with pytest.raises(LockTimeoutError, match="gave up after waiting"):
            await repo.rotate_dedup(rotation, timedelta(milliseconds=300))
        # Claims that queued behind the rotation went on once it gave up.
        assert await asyncio.wait_for(claim(database_url, ["x"]), 10) == {"x"}
        await transaction.commit()
    assert [r["generation"] for r in await generations(database_url)] == [1]
    await repo.close()


async def test_a_held_maintenance_reports_lock_timeout_and_no_rotation(
    settings: Settings, database_url: str
) -> None:
    async with claim_in_flight(database_url, ["k"]) as transaction:
        report = await run_maintenance(settings, lock_timeout=timedelta(milliseconds=200))
        await transaction.rollback()
    assert report.ok
    assert report.dedup.hold is Hold.LOCK_TIMEOUT
    assert report.dedup.started is None
    assert [r["generation"] for r in await generations(database_url)] == [1]


async def test_dedup_keys_of_a_consumer_without_a_deployment_are_never_forgotten(
    settings: Settings, database_url: str
) -> None:
    async with session(database_url) as admin:  # the owner: not subject to row-level security
        await admin.execute(
            "INSERT INTO core.event_handled (consumer, dedup_key, event_id, outcome, "
            "source_partition, source_offset, slot) "
            "VALUES ('someone-else', 'x', gen_random_uuid(), 'applied', 0, 0, 0)"
        )
    await run_maintenance(settings)
    for _ in range(2):
        await age(database_url, 30 * DAY)
        report = await run_maintenance(settings)
    assert report.dedup.hold is Hold.UNKNOWN_CONSUMER
    assert report.dedup.unknown_consumers == ["someone-else"]
    assert [r["forgotten_at"] for r in await generations(database_url)] == [None, None]


async def test_a_dry_run_reports_the_rotation_and_changes_nothing(
    settings: Settings, database_url: str
) -> None:
    report = await run_maintenance(settings, dry_run=True)
    assert report.dedup.hold is Hold.NONE
    assert report.dedup.started == 2
    assert report.outbox.started == 2
    assert [r["generation"] for r in await generations(database_url)] == [1]
    assert [r["generation"] for r in await generations(database_url, "outbox")] == [1]


async def test_without_a_current_generation_a_claim_fails_as_an_infrastructure_fault(
    database_url: str,
) -> None:
    """Never "every key is a duplicate": the engine pauses and retries instead."""
    async with session(database_url) as admin:
        await admin.execute("UPDATE core.dedup_generations SET ended_at = now()")
    with pytest.raises(asyncpg.PostgresError, match="no current generation") as raised:
        await claim(database_url, ["k"])
    assert is_transient(raised.value)


async def test_the_consumers_of_a_slot_follow_its_claims_and_its_truncation(
    database_url: str,
) -> None:
    """Maintenance lists a slot's consumers from core.dedup_slot_consumers (migration
    dedup_key_leads): a committed claim adds its consumer, a rolled-back one does not, a claim
    never waits for another's uncommitted pair, a consumer whose rows were deleted is no longer
    named, and forgetting the slot empties its list."""
    repo, rotation = await first_rotation(database_url)
    assert await repo.consumers_in_slot(0) == []
    async with claim_in_flight(database_url, ["k"]) as transaction:
        # The pair is uncommitted: a claim of the same consumer adds its own, without waiting.
        assert await asyncio.wait_for(claim(database_url, ["x"]), 10) == {"x"}
        await transaction.rollback()
    assert await repo.consumers_in_slot(0) == ["rule-candidates"]
    async with session(database_url) as admin:
        await admin.execute("INSERT INTO core.consumer_roles VALUES ('other', 'spectral_executor')")
    await claim(database_url, ["y"], consumer="other", role="spectral_executor")
    assert await repo.consumers_in_slot(0) == ["other", "rule-candidates"]
    assert await repo.consumers_in_slot(1) == []
    async with session(database_url) as admin:
        # An operator deletes a consumer's keys (what the unknown_consumer alert says to do):
        # it is no longer named, so it cannot hold a rotation back for ever.
        await admin.execute("DELETE FROM core.event_handled WHERE consumer = 'other'")
    assert await repo.consumers_in_slot(0) == ["rule-candidates"]
    await claim(database_url, ["y2"], consumer="other", role="spectral_executor")
    assert await repo.consumers_in_slot(0) == ["other", "rule-candidates"]
    await repo.rotate_dedup(rotation, timedelta(seconds=30))  # generation 2 in slot 1
    [first, second] = await repo.dedup_generations()
    await claim(database_url, ["z"])
    assert await repo.consumers_in_slot(1) == ["rule-candidates"]
    await repo.rotate_dedup(
        DedupRotation(second, first, 3, 0, timedelta(minutes=10)), timedelta(seconds=30)
    )
    assert await repo.consumers_in_slot(0) == []  # slot 0 forgotten (truncated)
    assert await repo.consumers_in_slot(1) == ["rule-candidates"]
    await repo.close()
