"""deploy-tracker against real Kafka and PostgreSQL: publish through the outbox, consume,
dead-letter, replay (deduplicated) and rebuild."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
from deploy_tracker.events import DEPLOY_FINISHED, DeployFinished
from deploy_tracker.producer import announce

from spectral.extend import Outcome
from spectral.testing import Harness

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def _deploy(number: int, service: str, outcome: str = "succeeded") -> DeployFinished:
    return DeployFinished.model_validate(
        {
            "deploy_id": f"d-{number}",
            "service": service,
            "outcome": outcome,
            "finished_at": T0 + timedelta(minutes=number),
        }
    )


async def _counts(spectral: Harness) -> dict[tuple[str, str], int]:
    conn = await spectral.connect()
    try:
        rows = await conn.fetch("SELECT service, outcome, deploys FROM deploys.service_outcomes")
    finally:
        await conn.close()
    return {(r["service"], r["outcome"]): r["deploys"] for r in rows}


async def test_deploys_are_counted_once_and_a_blank_service_is_dead_lettered(
    spectral: Harness,
) -> None:
    deploys = [_deploy(1, "api"), _deploy(2, "api", "failed"), _deploy(3, "web"), _deploy(4, " ")]
    # The producer's way: its own transaction, the outbox, the relay.
    conn = await spectral.connect()
    try:
        async with conn.transaction():
            await announce(conn, deploys)
    finally:
        await conn.close()
    assert await spectral.publish() == len(deploys)  # relays what the producer enqueued
    # A second copy of deploy 1 (a producer retrying): deduplicated by its idempotency key.
    assert await spectral.publish(DEPLOY_FINISHED.envelope(_deploy(1, "api"))) == 1

    first = await spectral.run_until_idle("deploy-tracker")

    assert first.counts[Outcome.APPLIED] == 3
    assert first.counts[Outcome.DEDUPLICATED] == 1
    assert first.counts[Outcome.DEAD_LETTERED] == 1
    assert await _counts(spectral) == {
        ("api", "succeeded"): 1,
        ("api", "failed"): 1,
        ("web", "succeeded"): 1,
    }
    [letter] = await spectral.dead_letters(DEPLOY_FINISHED.event_type)
    assert letter.reason == "handler_rejected"
    assert letter.dlq["dlq.consumer"] == "deploy-tracker"

    # Rebuilt from the topic: the same projection, whatever happened to the tables meanwhile.
    conn = await spectral.connect()
    try:
        await conn.execute("UPDATE deploys.service_outcomes SET deploys = 99")
    finally:
        await conn.close()
    rebuilt = await spectral.rebuild("deploy-tracker")
    assert rebuilt.complete
    assert rebuilt.committed
    assert await _counts(spectral) == {
        ("api", "succeeded"): 1,
        ("api", "failed"): 1,
        ("web", "succeeded"): 1,
    }


async def test_the_projection_role_cannot_touch_spectrals_tables(spectral: Harness) -> None:
    conn = await spectral.connect()
    try:
        await conn.execute("SET ROLE deploys_projector")
        try:
            await conn.execute("DELETE FROM core.outbox")
        except asyncpg.InsufficientPrivilegeError:
            pass
        else:
            raise AssertionError("the projector deleted spectral's outbox")
    finally:
        await conn.close()
