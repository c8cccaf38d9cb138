"""The rule-candidates handler's work ahead of the dedup claim (Handler.ahead): whatever
deliveries the claim then finds to be duplicates, finishing it for the fresh ones sends the
upsert the same rows and reports the same outcomes as applying the fresh ones from scratch
(``apply``), which is what the engine did before the claim and the handler ran side by side."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from typing import Any
from uuid import uuid4

from hypothesis import given, settings
from hypothesis import strategies as st

from consumers.rule_candidates.handler import RuleCandidatesHandler
from consumers.rule_candidates.repository import SnapshotRow, WrittenSnapshot
from contracts.failure_cluster import FailureClusterView
from spectral.engine.handler import Delivery, HandlerResult

CLUSTERS = [str(uuid4()) for _ in range(5)]
HOUR_US = 3_600_000_000


class Recorded:
    """A repository that notes the rows it was sent and answers as a stored projection might:
    a function of each row alone (some rows kept out as stale, some answered with the order
    key of the snapshot they replaced), so the same row always gets the same answer."""

    def __init__(self) -> None:
        self.sent: list[SnapshotRow] = []

    async def upsert(self, conn: Any, rows: Sequence[SnapshotRow]) -> list[WrittenSnapshot]:  # noqa: ARG002
        self.sent.extend(rows)
        answer = []
        for row in rows:
            digest = hashlib.sha256(repr(row).encode()).digest()
            if digest[0] % 5 == 0:
                continue  # the stored snapshot is newer
            prior = None
            if row[-1]:  # prior_wanted
                stored = row[7] - (digest[1] % 4) * HOUR_US  # last_observed_us, earlier or same
                prior = (stored, stored, row[5] - digest[2] % 3, "0" * 32)
            answer.append(
                WrittenSnapshot(str(row[0]), digest[3] % 2 == 0, digest[4] % 7 == 0, prior)
            )
        return answer


def _delivery(index: int, cluster: str, hour: int, count: int, stamp_ms: int) -> Delivery:
    last = 1_700_000_000_000_000 + hour * HOUR_US
    view = FailureClusterView(
        cluster_id=cluster,
        snapshot_hash=hashlib.md5(f"{cluster}{hour}{count}".encode()).hexdigest(),  # noqa: S324
        rule_id=str(uuid4()),
        workspace_id=str(uuid4()),
        severity=("low", "medium", "high")[count % 3],
        failure_count=count,
        first_observed_us=last - HOUR_US,
        last_observed_us=last,
        suggested_rule_stub=None,
        evidence=b"[]",
    )
    return Delivery(
        payload=view,
        idempotency_key=f"{cluster}:{view.snapshot_hash}:{index}",
        event_id=uuid4(),
        topic="t",
        partition=0,
        offset=index,
        key=cluster.encode(),
        raw=b"{}",
        timestamp_ms=stamp_ms,
    )


batches = st.lists(
    st.tuples(
        st.sampled_from(CLUSTERS),
        st.integers(0, 6),  # hour: order keys repeat, go back and forth
        st.integers(1, 4),  # failure_count
        st.sampled_from([0, 1_700_000_000_000 + 3_000_000, 1_700_000_000_000 + 30_000_000]),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(batches, st.data())
def test_finishing_ahead_for_the_fresh_ones_is_applying_them(
    spec: list[tuple[str, int, int, int]], data: st.DataObject
) -> None:
    batch = [_delivery(i, *fields) for i, fields in enumerate(spec)]
    held = data.draw(st.sets(st.sampled_from(range(len(batch)))), label="held")
    fresh = [d for i, d in enumerate(batch) if i not in held]
    if not fresh:
        return  # the engine applies nothing then

    async def both() -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        ahead = RuleCandidatesHandler(None, repository=Recorded())  # type: ignore[arg-type]
        finish = ahead.ahead(batch)
        scratch = RuleCandidatesHandler(None, repository=Recorded())  # type: ignore[arg-type]
        return (
            _seen(ahead, await finish(None, fresh)),  # type: ignore[arg-type]
            _seen(scratch, await scratch.apply(None, fresh)),  # type: ignore[arg-type]
        )

    finished, applied = asyncio.run(both())
    assert finished == applied


def test_deliveries_that_are_not_the_batch_less_some_are_worked_out_again() -> None:
    """``fresh`` out of the batch's order (or not of it): what was worked out ahead is not
    patched but done again for them, as ``apply`` would."""
    batch = [_delivery(i, CLUSTERS[i % 2], i, 1, 0) for i in range(6)]
    fresh = [batch[3], batch[1], _delivery(9, CLUSTERS[2], 1, 1, 0)]

    async def both() -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        ahead = RuleCandidatesHandler(None, repository=Recorded())  # type: ignore[arg-type]
        scratch = RuleCandidatesHandler(None, repository=Recorded())  # type: ignore[arg-type]
        return (
            _seen(ahead, await ahead.ahead(batch)(None, fresh)),  # type: ignore[arg-type]
            _seen(scratch, await scratch.apply(None, fresh)),  # type: ignore[arg-type]
        )

    finished, applied = asyncio.run(both())
    assert finished == applied


def _seen(handler: RuleCandidatesHandler, result: HandlerResult[Any]) -> tuple[Any, ...]:
    """The rows the handler sent (in any order) and everything its result reports."""
    repository = handler.repository
    assert isinstance(repository, Recorded)
    return (
        sorted(repository.sent, key=repr),
        sorted(result.stale),
        dict(result.facts),
        sorted(c.items() for c in result.carry),
        result.rejected,
    )
