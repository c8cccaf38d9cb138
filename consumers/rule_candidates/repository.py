"""All database work of the rule-candidates projection (role ``spectral_projector``).

Statements live in queries.sql beside this module; each runs once per batch over arrays.
Driver errors are translated at this boundary (TransientError / PermanentError).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final, TypeAlias
from uuid import UUID

import asyncpg
import msgspec

from consumers.rule_candidates.churn import RETENTION_HOURS, WindowCount
from consumers.rule_candidates.collapse import OrderKey
from spectral.db.connect import Conn, guarded
from spectral.db.queries import load_queries

QUERIES: Final = Path(__file__).with_name("queries.sql")


SnapshotRow: TypeAlias = tuple[
    str | UUID,
    str,
    str | UUID,
    str | UUID,
    str,
    int,
    int,
    int,
    str | None,
    bytes,
    int | None,
    bool,
]
"""One snapshot to upsert, a ``platform.rule_candidate_snapshot_us`` (migrations
``rule_candidate_snapshot_rows``, ``projection_times_as_microseconds``): ``(cluster_id,
snapshot_hash, rule_id, workspace_id, severity, failure_count, first_observed_us,
last_observed_us, suggested_rule_stub, evidence, ordered_us, prior_wanted)`` — a
:class:`~contracts.failure_cluster.FailureClusterView`'s fields in their order, then
``ordered_us`` (last_observed_us capped for a producer's clock, collapse.py ``ordered_at``; None
when it is last_observed_us) and whether the order key of the snapshot it replaces is wanted
back (:attr:`WrittenSnapshot.prior`). Times in whole microseconds since the Unix epoch; UUIDs in
their wire spelling or as UUIDs. ``evidence`` is the snapshot's evidence bundle as JSON
text (a JSON array: the bundle as the view carries it, ``FailureClusterView.evidence``; or a
whole record value, from which the database takes the bundle): what the upsert stores as jsonb.
A plain tuple: the driver encodes a row's fields directly, where parallel arrays cost it a check
of every element."""

SNAPSHOT_FIELDS: Final = (
    "cluster_id",
    "snapshot_hash",
    "rule_id",
    "workspace_id",
    "severity",
    "failure_count",
    "first_observed_us",
    "last_observed_us",
    "suggested_rule_stub",
    "evidence",
    "ordered_us",
    "prior_wanted",
)
"""The fields of a :data:`SnapshotRow`, in order."""


class _Evidence(msgspec.Struct, gc=False):
    evidence_bundle: msgspec.Raw


class _Record(msgspec.Struct, gc=False):
    payload: _Evidence


_read_evidence: Final = msgspec.json.Decoder(_Record).decode


def evidence_bytes(envelope: bytes) -> bytes:
    """The evidence bundle's bytes exactly as they stand in a record ``envelope`` (a JSON array:
    the contract's bundle), or the envelope itself when they cannot be told apart cheaply (an
    unknown member nested deeper than this reader goes): the upsert then takes the bundle from
    the whole record, as it always could. The database parses only the bundle into jsonb, not the
    whole envelope (~1 KB, of which the bundle is about half); fields a newer producer added to
    the bundle are kept, as on the wire, and a member named twice counts by its last occurrence,
    as jsonb counts it."""
    try:
        bundle = bytes(_read_evidence(envelope).payload.evidence_bundle)
    except (RecursionError, msgspec.MsgspecError):
        return envelope
    return bundle if bundle.startswith(b"[") else envelope


class WrittenSnapshot(msgspec.Struct, frozen=True, gc=False):
    """A cluster whose snapshot was written (not stale)."""

    cluster_id: str
    """Its UUID's wire spelling."""
    inserted: bool
    resurfaced: bool
    prior: OrderKey | None = None
    """The order key of the snapshot it replaced, when its row asked for it (``prior_wanted``),
    else None, as for a new cluster; a time the table held as -infinity (a rebuild's reset) is
    the least 64-bit integer."""


@dataclass(frozen=True, slots=True)
class ChurnWindows:
    current_hour: datetime
    windows: tuple[WindowCount, ...]


class RuleCandidatesRepository:
    def __init__(self) -> None:
        self._sql = load_queries(QUERIES)

    async def upsert(self, conn: Conn, rows: Sequence[SnapshotRow]) -> list[WrittenSnapshot]:
        """Upsert one snapshot per cluster (``rows``: at most one per cluster); returns the
        clusters actually written."""
        if not rows:
            return []
        records = await guarded(
            "upsert rule candidates",
            lambda: conn.fetch(self._sql["upsert_snapshots"], rows),
        )
        # prior_ordered_us is NULL where the stored ordered_at is (it then equals the prior
        # last_observed_at: migration projection_ordered_at_may_be_null): read as that
        return [
            WrittenSnapshot(
                r["cluster_id"],
                r["inserted"],
                r["resurfaced"],
                None
                if (last := r["prior_last_observed_us"]) is None
                else (
                    last if (ordered := r["prior_ordered_us"]) is None else ordered,
                    last,
                    r["prior_failure_count"],
                    r["prior_snapshot_hash"],
                ),
            )
            for r in records
        ]

    async def churn_windows(self, conn: Conn, first: int, last: int) -> ChurnWindows:
        """Distinct cluster_ids signalled in 24-hour windows ``first..last`` (see churn.py)."""
        records: Sequence[asyncpg.Record] = await guarded(
            "read churn windows", lambda: conn.fetch(self._sql["churn_windows"], first, last)
        )
        return ChurnWindows(
            current_hour=records[0]["current_hour"],
            windows=tuple(
                WindowCount(r["window_index"], r["covered"], r["clusters"]) for r in records
            ),
        )

    async def prune_signals(self, conn: Conn) -> None:
        """Forget signal hours the churn reading no longer needs."""
        await guarded(
            "prune cluster signal hours",
            lambda: conn.execute(self._sql["prune_signal_hours"], RETENTION_HOURS),
        )
