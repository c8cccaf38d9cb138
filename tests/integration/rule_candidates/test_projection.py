"""The rule-candidates handler against the real database, acting as spectral_projector."""

from __future__ import annotations

import json
import uuid

import pytest
from prometheus_client import CollectorRegistry

from tests.events import encode
from tests.integration.rule_candidates.helpers import (
    apply,
    connected,
    deliveries,
    delivery,
    delivery_of_bytes,
    new_cluster,
    new_handler,
    row,
    sample,
    snapshot,
)

pytestmark = pytest.mark.integration

SNAPSHOTS = "spectral_rule_candidates_snapshots_total"


async def test_a_new_cluster_is_inserted_pending(database_url: str) -> None:
    registry = CollectorRegistry()
    handler = new_handler(registry)
    cluster = new_cluster()
    event = snapshot(cluster, minutes=5, failures=7, severity="high", stub="when x then y")
    result = await apply(database_url, handler, deliveries(event))

    assert result.stale == set()
    assert result.rejected == []
    assert result.facts["inserted"] == 1
    assert result.facts["resurfaced"] == 0
    stored = await row(database_url, cluster)
    payload = event.payload
    assert stored["status"] == "pending"
    assert stored["snapshot_hash"] == payload.snapshot_hash
    assert (stored["rule_id"], stored["workspace_id"]) == (payload.rule_id, payload.workspace_id)
    assert (stored["severity"], stored["failure_count"]) == ("high", 7)
    assert stored["first_observed_at"] == payload.first_observed_at
    assert stored["last_observed_at"] == payload.last_observed_at
    assert stored["suggested_rule_stub"] == "when x then y"
    assert stored["assigned_to"] is None
    assert stored["notes"] is None
    assert stored["deleted_at"] is None
    assert stored["resurfaced_at"] is None
    wire = json.loads(encode(event))["payload"]["evidence_bundle"]
    assert json.loads(stored["evidence_bundle"]) == wire
    assert sample(registry, SNAPSHOTS, outcome="applied", severity="high") == 1
    assert sample(registry, "spectral_rule_candidates_new_clusters_total", severity="high") == 1


async def test_unknown_fields_of_the_evidence_are_kept_as_on_the_wire(database_url: str) -> None:
    cluster = new_cluster()
    wire = json.loads(encode(snapshot(cluster)))
    wire["payload"]["evidence_bundle"][0]["trace_url"] = "https://example.test/t/1"
    from contracts import snapshot_hash  # noqa: PLC0415 - the hash is recomputed for the test

    wire["payload"]["snapshot_hash"] = snapshot_hash(wire["payload"])
    wire["idempotency_key"] = f"{cluster}:{wire['payload']['snapshot_hash']}"
    raw = json.dumps(wire).encode()
    await apply(database_url, new_handler(), [delivery_of_bytes(raw)])
    stored = json.loads((await row(database_url, cluster))["evidence_bundle"])
    assert stored[0]["trace_url"] == "https://example.test/t/1"


async def test_a_newer_snapshot_updates_and_operator_columns_survive(database_url: str) -> None:
    handler = new_handler()
    cluster = new_cluster()
    await apply(database_url, handler, deliveries(snapshot(cluster, minutes=1, failures=2)))
    operator = uuid.uuid4()
    async with connected(database_url, "spectral_operator") as conn:
        await conn.execute(
            "UPDATE platform.rule_candidates_pending SET status = 'in_review', assigned_to = $2,"
            " notes = 'looking', deleted_at = NULL WHERE cluster_id = $1",
            cluster,
            operator,
        )
    before = await row(database_url, cluster)

    newer = snapshot(cluster, minutes=9, failures=12, severity="high")
    result = await apply(database_url, handler, deliveries(newer))

    assert result.stale == set()
    assert result.facts["updated"] == 1
    after = await row(database_url, cluster)
    assert after["snapshot_hash"] == newer.payload.snapshot_hash
    assert (after["failure_count"], after["severity"]) == (12, "high")
    assert after["last_observed_at"] == newer.payload.last_observed_at
    assert after["last_signaled_at"] > before["last_signaled_at"]
    assert after["created_at"] == before["created_at"]
    assert (after["status"], after["assigned_to"], after["notes"]) == (
        "in_review",
        operator,
        "looking",
    )
    assert after["resurfaced_at"] is None  # in_review is not a settled state


async def test_an_older_snapshot_is_ignored_and_reported_stale(database_url: str) -> None:
    registry = CollectorRegistry()
    handler = new_handler(registry)
    cluster = new_cluster()
    newer = snapshot(cluster, minutes=10, failures=5, severity="low")
    await apply(database_url, handler, deliveries(newer))
    before = await row(database_url, cluster)

    older = snapshot(cluster, minutes=3, failures=50, severity="low")
    result = await apply(database_url, handler, deliveries(older))

    assert result.stale == {older.idempotency_key}
    after = await row(database_url, cluster)
    assert after["snapshot_hash"] == newer.payload.snapshot_hash
    assert after["last_signaled_at"] == before["last_signaled_at"]
    assert sample(registry, SNAPSHOTS, outcome="stale", severity="low") == 1


async def test_a_snapshot_equal_to_the_stored_one_changes_nothing(database_url: str) -> None:
    handler = new_handler()
    cluster = new_cluster()
    first = snapshot(cluster, minutes=4)
    await apply(database_url, handler, deliveries(first))
    before = await row(database_url, cluster)
    result = await apply(database_url, handler, [delivery(first, offset=7)])
    assert result.stale == {first.idempotency_key}
    assert (await row(database_url, cluster))["last_signaled_at"] == before["last_signaled_at"]


async def test_several_snapshots_in_one_batch_collapse_to_the_newest(database_url: str) -> None:
    handler = new_handler()
    a, b = new_cluster(), new_cluster()
    a2 = snapshot(a, minutes=2, failures=2)
    a5 = snapshot(a, minutes=5, failures=5)
    a1 = snapshot(a, minutes=1, failures=1)  # arrives after a newer one: stale
    a9 = snapshot(a, minutes=9, failures=9)
    b3 = snapshot(b, minutes=3, failures=3)
    tie_low = snapshot(b, minutes=3, failures=1)  # same instant, fewer failures: stale

    result = await apply(database_url, handler, deliveries(a2, a5, b3, a1, a9, tie_low))

    assert result.stale == {a1.idempotency_key, tie_low.idempotency_key}
    assert result.facts["inserted"] == 2
    assert result.facts["superseded"] == 2  # a2 and a5: applied, then overwritten by a9
    assert (await row(database_url, a))["snapshot_hash"] == a9.payload.snapshot_hash
    assert (await row(database_url, b))["snapshot_hash"] == b3.payload.snapshot_hash


async def test_a_batch_older_than_the_stored_one_is_stale_throughout(
    database_url: str,
) -> None:
    handler = new_handler()
    cluster = new_cluster()
    await apply(database_url, handler, deliveries(snapshot(cluster, minutes=30)))
    older = [snapshot(cluster, minutes=m, failures=m) for m in (1, 5, 3)]
    result = await apply(database_url, handler, deliveries(*older))
    assert result.stale == {e.idempotency_key for e in older}
    assert "updated" not in result.facts


async def test_a_snapshot_older_than_the_stored_one_is_stale_before_a_newer_one(
    database_url: str,
) -> None:
    """Collapsing a batch must give what applying it one by one gives: ``older`` loses to the
    stored snapshot even though a newer one follows it in its batch (whatever the batching)."""
    registry = CollectorRegistry()
    handler = new_handler(registry)
    cluster = new_cluster()
    await apply(database_url, handler, deliveries(snapshot(cluster, minutes=10, failures=10)))
    older = snapshot(cluster, minutes=5, failures=5, severity="low")
    between = snapshot(cluster, minutes=15, failures=15, severity="low")
    newest = snapshot(cluster, minutes=20, failures=20, severity="low")

    result = await apply(database_url, handler, deliveries(older, between, newest))

    assert result.stale == {older.idempotency_key}
    assert result.facts["updated"] == 1
    assert result.facts["superseded"] == 1  # between: newer than the stored one, then overwritten
    assert (await row(database_url, cluster))["snapshot_hash"] == newest.payload.snapshot_hash
    assert sample(registry, SNAPSHOTS, outcome="stale", severity="low") == 1
    assert sample(registry, SNAPSHOTS, outcome="applied", severity="low") == 2


@pytest.mark.parametrize("settled", ["dismissed", "resolved"])
async def test_a_settled_cluster_that_comes_back_is_marked_resurfaced(
    database_url: str, settled: str
) -> None:
    registry = CollectorRegistry()
    handler = new_handler(registry)
    cluster = new_cluster()
    await apply(database_url, handler, deliveries(snapshot(cluster, minutes=1)))
    async with connected(database_url, "spectral_operator") as conn:
        await conn.execute(
            "UPDATE platform.rule_candidates_pending SET status = $2 WHERE cluster_id = $1",
            cluster,
            settled,
        )

    back = snapshot(cluster, minutes=20, failures=40, severity="high")
    result = await apply(database_url, handler, deliveries(back))

    assert result.facts["resurfaced"] == 1
    stored = await row(database_url, cluster)
    assert stored["status"] == settled
    assert stored["resurfaced_at"] is not None
    assert stored["resurfaced_at"] == stored["last_signaled_at"]
    assert stored["snapshot_hash"] == back.payload.snapshot_hash
    assert sample(registry, "spectral_rule_candidates_resurfaced_total", severity="high") == 1

    # An older snapshot does not resurface it again.
    stale = snapshot(cluster, minutes=2)
    result = await apply(database_url, handler, deliveries(stale))
    assert result.facts["resurfaced"] == 0
    assert (await row(database_url, cluster))["resurfaced_at"] == stored["resurfaced_at"]


async def test_pending_clusters_never_resurface(database_url: str) -> None:
    handler = new_handler()
    cluster = new_cluster()
    await apply(database_url, handler, deliveries(snapshot(cluster, minutes=1)))
    result = await apply(database_url, handler, deliveries(snapshot(cluster, minutes=2)))
    assert result.facts["resurfaced"] == 0
    assert (await row(database_url, cluster))["resurfaced_at"] is None


async def test_every_count_the_contract_allows_is_stored(database_url: str) -> None:
    handler = new_handler()
    huge = new_cluster()
    result = await apply(database_url, handler, deliveries(snapshot(huge, failures=2**53 - 1)))
    assert result.rejected == []
    assert (await row(database_url, huge))["failure_count"] == 2**53 - 1


async def test_applied_clusters_are_recorded_for_the_churn_gauge(database_url: str) -> None:
    handler = new_handler()
    a, b = new_cluster(), new_cluster()
    await apply(database_url, handler, deliveries(snapshot(a, minutes=5), snapshot(b)))
    await apply(database_url, handler, deliveries(snapshot(a, minutes=1)))  # stale
    await apply(database_url, handler, deliveries(snapshot(a, minutes=9)))  # same hour again
    async with connected(database_url, None) as conn:
        rows = await conn.fetch("SELECT hour, cluster_id FROM platform.cluster_signal_hours")
    assert sorted(r["cluster_id"] for r in rows) == sorted([a, b])
    assert all(r["hour"].minute == 0 and r["hour"].second == 0 for r in rows)


async def test_a_valid_record_with_a_deep_unknown_field_and_an_escaped_backslash_applies(
    database_url: str,
) -> None:
    # The deepest nesting the reader parses (1,024 levels with the envelope) in an unknown
    # envelope field, and the six characters \u0000 (an escaped backslash, not U+0000) in the
    # payload: a valid record, so it must apply (it once raised RecursionError in the handler).
    handler = new_handler()
    cluster = new_cluster()
    record = encode(snapshot(cluster, summary="C:\\u0000 is a path, not a NUL"))
    deep = b"[" * 1022 + b'"\\\\u0000"' + b"]" * 1022  # spliced in: json.dumps would recurse
    raw = record[:-1] + b',"trace":' + deep + b"}"
    result = await apply(database_url, handler, [delivery_of_bytes(raw)])
    assert result.rejected == []
    assert result.facts["inserted"] == 1
    stored = await row(database_url, cluster)
    assert json.loads(stored["evidence_bundle"])[0]["summary"] == "C:\\u0000 is a path, not a NUL"
