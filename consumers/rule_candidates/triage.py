"""Operator triage of the rule-candidates inbox (ADR-057 D5), acting as ``spectral_operator``.

The operator role may read the inbox and write only ``status``, ``assigned_to``, ``notes`` and
``deleted_at`` (0002_rule_candidates.sql); the status policy is transitions.py. Everything is
read and written through :class:`TriageRepository`, which returns frozen values.

"Resurfaced" in these views means: the cluster came back (a newer, different snapshot arrived
while it was dismissed or resolved) after the operator's last status change. Re-triaging it
(any status change) takes it out of the ``--resurfaced`` view until it comes back again.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Final, Literal
from uuid import UUID

import asyncpg

from consumers.rule_candidates.repository import Conn
from consumers.rule_candidates.transitions import Status, check
from spectral.db.connect import connect, guarded
from spectral.db.queries import load_queries
from spectral.errors import PermanentError

OPERATOR_ROLE: Final = "spectral_operator"
QUERIES: Final = Path(__file__).with_name("queries.sql")


class Severity(StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


class ClusterNotFoundError(PermanentError):
    """No rule candidate has this cluster_id."""


async def connect_operator(database_url: str, *, assume_role: bool = True) -> asyncpg.Connection:
    """A connection acting as the operator role (``assume_role=False`` for a login that
    already is one, e.g. ``SPECTRAL_OPERATOR_DATABASE_URL``)."""
    return await connect(database_url, role=OPERATOR_ROLE if assume_role else None)


@dataclass(frozen=True, slots=True)
class CandidateSummary:
    """One inbox row as listed: the snapshot's headline and the triage state."""

    cluster_id: UUID
    status: Status
    severity: str
    workspace_id: UUID
    rule_id: UUID
    failure_count: int
    first_observed_at: datetime
    last_observed_at: datetime
    last_signaled_at: datetime
    created_at: datetime
    assigned_to: UUID | None
    resurfaced_at: datetime | None
    status_changed_at: datetime | None
    deleted_at: datetime | None
    resurfaced: bool

    def to_json(self) -> dict[str, Any]:
        return {name: _json_value(value) for name, value in asdict(self).items()}


@dataclass(frozen=True, slots=True)
class CandidateDetail(CandidateSummary):
    """One inbox row in full: the summary plus the evidence, the stub and the notes."""

    snapshot_hash: str
    notes: str | None
    suggested_rule_stub: str | None
    evidence_bundle: list[Any]


@dataclass(frozen=True, slots=True)
class ListFilter:
    status: Status | None = None
    severity: Severity | None = None
    workspace_id: UUID | None = None
    resurfaced_only: bool = False
    include_deleted: bool = False
    limit: int = 100


DeletedChange = Literal["keep", "delete", "restore"]


@dataclass(frozen=True, slots=True)
class TriageChange:
    """What an operator changes; fields left at their defaults are kept as they are."""

    status: Status | None = None
    change_assignee: bool = False
    assignee: UUID | None = None
    change_notes: bool = False
    notes: str | None = None
    deleted: DeletedChange = "keep"

    @property
    def is_empty(self) -> bool:
        return (
            self.status is None
            and not self.change_assignee
            and not self.change_notes
            and self.deleted == "keep"
        )


@dataclass(frozen=True, slots=True)
class TriageOutcome:
    previous_status: Status
    status_changed: bool
    candidate: CandidateDetail


class TriageRepository:
    """Reads and triage updates of platform.rule_candidates_pending (operator role)."""

    def __init__(self, conn: Conn) -> None:
        self._conn = conn
        self._sql = load_queries(QUERIES)

    async def list(self, where: ListFilter | None = None) -> list[CandidateSummary]:
        f = where or ListFilter()
        records = await guarded(
            "list rule candidates",
            lambda: self._conn.fetch(
                self._sql["list_candidates"],
                f.status.value if f.status else None,
                f.severity.value if f.severity else None,
                f.workspace_id,
                f.resurfaced_only,
                f.include_deleted,
                f.limit,
            ),
        )
        return [_summary(r) for r in records]

    async def get(self, cluster_id: UUID) -> CandidateDetail:
        record = await guarded(
            "read rule candidate",
            lambda: self._conn.fetchrow(self._sql["get_candidate"], cluster_id),
        )
        if record is None:
            raise ClusterNotFoundError(f"no rule candidate with cluster_id {cluster_id}")
        return _detail(record)

    async def update(self, cluster_id: UUID, change: TriageChange) -> TriageOutcome:
        """Apply ``change`` in one transaction, the status transition checked under a row lock.

        Raises ClusterNotFoundError, or transitions.TransitionError naming the allowed targets.
        """

        async def run() -> TriageOutcome:
            async with self._conn.transaction():
                current = await self._conn.fetchval(self._sql["lock_candidate"], cluster_id)
                if current is None:
                    raise ClusterNotFoundError(f"no rule candidate with cluster_id {cluster_id}")
                previous = Status(current)
                changed = check(previous, change.status) if change.status else False
                await self._conn.execute(
                    self._sql["update_triage"],
                    cluster_id,
                    change.status.value if changed and change.status else None,
                    change.change_assignee,
                    change.assignee,
                    change.change_notes,
                    change.notes,
                    change.deleted,
                )
                record = await self._conn.fetchrow(self._sql["get_candidate"], cluster_id)
            if record is None:  # the row is locked by this transaction: it cannot vanish
                raise ClusterNotFoundError(f"no rule candidate with cluster_id {cluster_id}")
            return TriageOutcome(previous, changed, _detail(record))

        return await guarded("triage rule candidate", run)


def _summary_fields(record: asyncpg.Record) -> dict[str, Any]:
    return {
        "cluster_id": record["cluster_id"],
        "status": Status(record["status"]),
        "severity": record["severity"],
        "workspace_id": record["workspace_id"],
        "rule_id": record["rule_id"],
        "failure_count": record["failure_count"],
        "first_observed_at": record["first_observed_at"],
        "last_observed_at": record["last_observed_at"],
        "last_signaled_at": record["last_signaled_at"],
        "created_at": record["created_at"],
        "assigned_to": record["assigned_to"],
        "resurfaced_at": record["resurfaced_at"],
        "status_changed_at": record["status_changed_at"],
        "deleted_at": record["deleted_at"],
        "resurfaced": record["resurfaced"],
    }


def _summary(record: asyncpg.Record) -> CandidateSummary:
    return CandidateSummary(**_summary_fields(record))


def _detail(record: asyncpg.Record) -> CandidateDetail:
    return CandidateDetail(
        **_summary_fields(record),
        snapshot_hash=record["snapshot_hash"],
        notes=record["notes"],
        suggested_rule_stub=record["suggested_rule_stub"],
        evidence_bundle=json.loads(record["evidence_bundle"]),
    )


def _json_value(value: Any) -> Any:
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    return value
