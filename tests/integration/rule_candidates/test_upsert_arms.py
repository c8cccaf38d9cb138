"""The projection's upsert updates the clusters it knows and inserts the others
(``platform.upsert_rule_candidate_snapshots``); its INSERT arm runs only when the UPDATE arm did
not take every snapshot of the batch (migration projection_insert_only_when_needed). Whatever a
batch mixes — known clusters with a newer snapshot, known clusters with an older one (stale),
clusters never seen — each cluster ends at its newest snapshot, the new ones are inserted, the
older ones reported stale; a batch of known clusters only, every snapshot newer (the INSERT arm
skipped), included."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.integration.rule_candidates.helpers import (
    apply,
    connected,
    deliveries,
    new_handler,
    snapshot,
)

pytestmark = pytest.mark.integration

_ROLES = st.lists(st.sampled_from(["newer", "older", "new"]), min_size=1, max_size=8)
"""What each cluster of a batch is to the projection: known, with a newer or an older snapshot
than the stored one, or new."""


def test_each_cluster_ends_at_its_newest_snapshot_whichever_arm_takes_it(
    database_url: str,
) -> None:
    loop = asyncio.new_event_loop()
    handler = new_handler()

    @settings(max_examples=40, deadline=None, database=None)
    @given(_ROLES)
    @example(["newer"] * 5)  # every snapshot updated: the INSERT arm is skipped
    @example(["new"] * 3)
    @example(["newer", "older"])  # nothing to insert, yet not every snapshot updated
    @example(["newer", "new"])
    def batch(roles: list[str]) -> None:
        clusters = [uuid.uuid4() for _ in roles]
        known = [c for c, role in zip(clusters, roles, strict=True) if role != "new"]
        if known:
            loop.run_until_complete(
                apply(
                    database_url,
                    handler,
                    deliveries(*(snapshot(c, minutes=10, failures=10) for c in known)),
                )
            )
        minutes = {"newer": 20, "older": 5, "new": 1}
        sent = [
            snapshot(c, minutes=minutes[role], failures=minutes[role])
            for c, role in zip(clusters, roles, strict=True)
        ]

        result = loop.run_until_complete(apply(database_url, handler, deliveries(*sent)))

        older = {e.idempotency_key for e, role in zip(sent, roles, strict=True) if role == "older"}
        assert result.stale == older
        assert result.facts.get("inserted", 0) == roles.count("new")
        assert result.facts.get("updated", 0) == roles.count("newer")
        stored = loop.run_until_complete(_stored(database_url, clusters))
        for cluster, envelope, role in zip(clusters, sent, roles, strict=True):
            expected = 10 if role == "older" else minutes[role]
            assert stored[cluster] == expected, (role, stored[cluster])
            if role != "older":
                assert envelope.payload.failure_count == expected

    try:
        batch()
    finally:
        loop.close()


async def _stored(database_url: str, clusters: list[uuid.UUID]) -> dict[uuid.UUID, int]:
    """Each cluster's stored failure count (the tests make it the snapshot's minutes)."""
    async with connected(database_url, None) as conn:
        rows = await conn.fetch(
            "SELECT cluster_id, failure_count FROM platform.rule_candidates_pending "
            "WHERE cluster_id = ANY($1::uuid[])",
            clusters,
        )
    return {r["cluster_id"]: r["failure_count"] for r in rows}
