"""All database work of the rule-candidates projection (role ``spectral_projector``).

Statements live in queries.sql beside this module; each runs once per batch over arrays.
Driver errors are translated at this boundary (TransientError / PermanentError).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

import asyncpg
import msgspec

from consumers.rule_candidates.churn import RETENTION_HOURS, WindowCount
from consumers.rule_candidates.collapse import OrderKey
from spectral.db.connect import Conn, guarded
from spectral.db.queries import load_queries

QUERIES: Final = Path(__file__).with_name("queries.sql")


@dataclass(frozen=True, slots=True)
class SnapshotRows:
    """Column arrays of the snapshots to upsert: element i of each is one cluster."""

    cluster_id: list[str]
    """UUIDs in their wire spelling (the database reads them as uuid)."""
    snapshot_hash: list[str]
    rule_id: list[str]
    workspace_id: list[str]
    severity: list[str]
    failure_count: list[int]
    first_observed_at: list[datetime]
    last_observed_at: list[datetime]
    evidence: list[bytes]
    """Each snapshot's evidence bundle as JSON text (a JSON array: the bundle as the view
    carries it, ``FailureClusterView.evidence``; or a whole record value, from which the
    database takes the bundle): what the upsert stores as jsonb."""
    suggested_rule_stub: list[str | None]
    ordered_at: list[datetime]
    """last_observed_at capped for a producer's clock (collapse.py ``ordered_at``)."""


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
    """The order key of the snapshot it replaced (None for a new cluster)."""


@dataclass(frozen=True, slots=True)
class ChurnWindows:
    current_hour: datetime
    windows: tuple[WindowCount, ...]


class RuleCandidatesRepository:
    def __init__(self) -> None:
        self._sql = load_queries(QUERIES)

    async def upsert(self, conn: Conn, rows: SnapshotRows) -> list[WrittenSnapshot]:
        """Upsert one snapshot per cluster; returns the clusters actually written."""
        if not rows.cluster_id:
            return []
        records = await guarded(
            "upsert rule candidates",
            lambda: conn.fetch(
                self._sql["upsert_snapshots"],
                rows.cluster_id,
                rows.snapshot_hash,
                rows.rule_id,
                rows.workspace_id,
                rows.severity,
                rows.failure_count,
                rows.first_observed_at,
                rows.last_observed_at,
                rows.evidence,
                rows.suggested_rule_stub,
                rows.ordered_at,
            ),
        )
        return [
            WrittenSnapshot(
                r["cluster_id"],
                r["inserted"],
                r["resurfaced"],
                None
                if r["prior_last_observed_at"] is None
                else (
                    r["prior_ordered_at"],
                    r["prior_last_observed_at"],
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
