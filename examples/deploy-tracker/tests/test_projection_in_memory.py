"""deploy-tracker's projection with no broker at all: spectral.testing's in-memory Kafka runs
the deploys through spectral's engine (decode, dedup, the projection, dead letters) inside this
test's own transaction, on PostgreSQL alone; the rollback at the end leaves nothing behind."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
from deploy_tracker.events import DEPLOY_FINISHED, DeployFinished
from deploy_tracker.projection import DeploysHandler

from spectral.extend import Outcome
from spectral.testing import MemoryKafka

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


async def test_deploys_are_counted_once_without_a_broker(spectral_database_url: str) -> None:
    kafka = MemoryKafka()
    deploys = [_deploy(1, "api"), _deploy(2, "api", "failed"), _deploy(3, "web"), _deploy(4, " ")]
    envelopes = [DEPLOY_FINISHED.envelope(d) for d in deploys]
    # Deploy 1 again, as a retrying producer sends it: deduplicated by its idempotency key.
    envelopes.append(DEPLOY_FINISHED.envelope(_deploy(1, "api")))
    # A producer spectral did not write, sending bytes that are no event at all.
    kafka.publish_raw(DEPLOY_FINISHED.event_type, b"{not json", key=b"d-5")

    conn = await asyncpg.connect(spectral_database_url)
    transaction = conn.transaction()
    await transaction.start()
    try:
        done = await kafka.apply(DeploysHandler(), conn, *envelopes)
        rows = await conn.fetch("SELECT service, outcome, deploys FROM deploys.service_outcomes")
    finally:
        await transaction.rollback()  # the test leaves nothing behind
        left = await conn.fetchval("SELECT count(*) FROM deploys.service_outcomes")
        await conn.close()

    assert left == 0
    assert done.count(Outcome.APPLIED) == 3
    assert done.count(Outcome.DEDUPLICATED) == 1
    assert done.count(Outcome.DEAD_LETTERED) == 2
    assert {(r["service"], r["outcome"]): r["deploys"] for r in rows} == {
        ("api", "succeeded"): 1,
        ("api", "failed"): 1,
        ("web", "succeeded"): 1,
    }
    assert sorted(d.reason for d in done.dead_letters) == ["handler_rejected", "not_json"]
    assert {d.dlq["dlq.consumer"] for d in done.dead_letters} == {"deploy-tracker"}
