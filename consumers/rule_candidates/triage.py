"""Operator triage of the rule-candidates inbox (ADR-057 D5), acting as ``spectral_operator``.

The operator role may read the inbox and write only ``status``, ``assigned_to``, ``notes`` and
``deleted_at`` (0002_rule_candidates.sql); the status policy is transitions.py, and the database
enforces the same table (0008: a trigger refuses any other status change, whoever writes it).
Every change of those columns bumps the row's ``triage_version`` and appends one row to the
audit trail ``platform.triage_audit`` (who, when, from -> to), both done by the database.
Callers that edited a version they read pass it as ``expected_version``: a row changed since is
refused (:class:`VersionConflictError`), so two operators never silently overwrite each other.
Everything is read and written through :class:`TriageRepository`, which returns frozen values.

"Resurfaced" in these views means: the cluster came back (a newer, different snapshot arrived
while it was dismissed or resolved) after the operator's last status change. Re-triaging it
(any status change) takes it out of the ``--resurfaced`` view until it comes back again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Final, Literal
from uuid import UUID

import asyncpg

from consumers.rule_candidates.transitions import Status, TransitionError, check
from spectral.db.connect import Conn, connect, guarded
from spectral.db.queries import load_queries
from spectral.errors import PermanentError

OPERATOR_ROLE: Final = "spectral_operator"
QUERIES: Final = Path(__file__).with_name("queries.sql")


class Severity(StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


class Sort(StrEnum):
    """Orders of the inbox (see list_candidates in queries.sql)."""

    SEVERITY = "severity"
    NEWEST = "newest"
    OLDEST = "oldest"
    FAILURES = "failures"
    SIGNALED = "signaled"


class ClusterNotFoundError(PermanentError):
    """No rule candidate has this cluster_id."""


class VersionConflictError(PermanentError):
    """The cluster's triage state changed since the version the caller edited."""

    def __init__(self, cluster_id: UUID, expected: int, current: int) -> None:
        self.expected = expected
        self.current = current
        super().__init__(
            f"cluster {cluster_id} is at triage version {current}, not {expected}: "
            "someone changed it meanwhile; reload it and apply your change again"
        )


_TRANSITION_CONSTRAINT: Final = "rule_candidates_triage_transition"


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
    triage_version: int
    summary: str | None
    """The first evidence's summary (at most 300 characters): what the cluster is about."""

    def to_json(self) -> dict[str, Any]:
        return {name: _json_value(value) for name, value in asdict(self).items()}


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One change of a cluster's triage state, as the database recorded it."""

    triage_version: int
    changed_at: datetime
    actor: str
    """The principal the surface declared (``token:NAME``), else ``db:LOGIN``."""
    db_login: str | None
    """The database login of the session that made the change (None: a row written before the
    migration triage_audit_login)."""
    from_status: str
    to_status: str
    from_assignee: UUID | None
    to_assignee: UUID | None
    from_notes: str | None
    to_notes: str | None
    from_deleted_at: datetime | None
    to_deleted_at: datetime | None

    def who(self) -> str:
        """The principal, and the login it came through when that is not already its name."""
        if self.db_login is None or self.actor == f"db:{self.db_login}":
            return self.actor
        return f"{self.actor} via {self.db_login}"

    def changes(self) -> dict[str, tuple[Any, Any]]:
        """What changed: {field: (from, to)} for the fields that differ."""
        pairs = {
            "status": (self.from_status, self.to_status),
            "assigned_to": (self.from_assignee, self.to_assignee),
            "notes": (self.from_notes, self.to_notes),
            "deleted_at": (self.from_deleted_at, self.to_deleted_at),
        }
        return {name: pair for name, pair in pairs.items() if pair[0] != pair[1]}

    def to_json(self) -> dict[str, Any]:
        return {
            "triage_version": self.triage_version,
            "changed_at": self.changed_at.isoformat(),
            "actor": self.actor,
            "db_login": self.db_login,
            "changes": {
                name: {"from": _json_value(old), "to": _json_value(new)}
                for name, (old, new) in self.changes().items()
            },
        }


@dataclass(frozen=True, slots=True)
class CandidateDetail(CandidateSummary):
    """One inbox row in full: the summary plus the evidence, the stub, the notes and the audit
    trail of its triage (oldest first)."""

    snapshot_hash: str
    notes: str | None
    suggested_rule_stub: str | None
    evidence_bundle: list[Any]
    audit: tuple[AuditEntry, ...] = ()

    def texts(self) -> dict[str, object]:
        """Every text of the cluster that a producer or an operator wrote, by where it is (what
        is checked for characters that are not seen, spectral/api/text.py)."""
        texts: dict[str, object] = {
            "summary": self.summary,
            "notes": self.notes,
            "suggested_rule_stub": self.suggested_rule_stub,
        }
        for i, item in enumerate(self.evidence_bundle):
            fields = item if isinstance(item, dict) else {"summary": item}
            for key, value in fields.items():
                texts[f"evidence_bundle[{i}].{key}"] = value
        for entry in self.audit:
            texts[f"audit[{entry.triage_version}].actor"] = entry.actor
            texts[f"audit[{entry.triage_version}].to_notes"] = entry.to_notes
        return texts

    def to_json(self) -> dict[str, Any]:
        out = {
            name: _json_value(getattr(self, name))
            for name in self.__dataclass_fields__
            if name != "audit"
        }
        out["audit"] = [entry.to_json() for entry in self.audit]
        return out


@dataclass(frozen=True, slots=True)
class ListFilter:
    status: Status | None = None
    severity: Severity | None = None
    workspace_id: UUID | None = None
    resurfaced_only: bool = False
    include_deleted: bool = False
    limit: int = 100
    assignee: UUID | None = None
    unassigned_only: bool = False
    sort: Sort = Sort.SEVERITY
    after: tuple[int, str, UUID] | None = None
    """The keyset to continue after (a page's ``next_key``)."""
    statuses: tuple[Status, ...] = ()
    """Any of these (``status``, when given, wins); empty: every status."""


@dataclass(frozen=True, slots=True)
class CandidatePage:
    rows: list[CandidateSummary]
    next_key: tuple[int, str, UUID] | None
    """Where the next page starts; None on the last page."""


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
        return (await self.page(where)).rows

    async def page(self, where: ListFilter | None = None) -> CandidatePage:
        """One page of the inbox in ``where.sort`` order, from ``where.after`` on."""
        f = where or ListFilter()
        after = f.after or (None, None, None)
        records = await guarded(
            "list rule candidates",
            lambda: self._conn.fetch(
                self._sql["list_candidates"],
                _statuses(f),
                f.severity.value if f.severity else None,
                f.workspace_id,
                f.assignee,
                f.resurfaced_only,
                f.include_deleted,
                f.limit + 1,
                f.sort.value,
                *after,
                f.unassigned_only,
            ),
        )
        rows = [_summary(r) for r in records[: f.limit]]
        last = records[f.limit - 1] if len(records) > f.limit else None
        next_key = (last["k1"], last["k2_text"], last["cluster_id"]) if last is not None else None
        return CandidatePage(rows, next_key)

    async def counts(self) -> dict[tuple[str, str], int]:
        """Live clusters per (status, severity)."""
        rows = await guarded("count the inbox", lambda: self._conn.fetch(self._sql["inbox_counts"]))
        return {(r["status"], r["severity"]): r["clusters"] for r in rows}

    async def failure_history(
        self, cluster_ids: Sequence[UUID]
    ) -> dict[UUID, Sequence[tuple[datetime, int]]]:
        """Each cluster's failure_count per signalled hour of the last 8 days, oldest first."""
        rows = await guarded(
            "read failure history",
            lambda: self._conn.fetch(self._sql["failure_history"], list(cluster_ids)),
        )
        found: dict[UUID, Sequence[tuple[datetime, int]]] = {}
        for r in rows:
            found[r["cluster_id"]] = (
                *found.get(r["cluster_id"], ()),
                (r["hour"], r["failure_count"]),
            )
        return found

    async def get(self, cluster_id: UUID) -> CandidateDetail:
        async def run() -> CandidateDetail:
            async with self._conn.transaction(isolation="repeatable_read", readonly=True):
                record = await self._conn.fetchrow(self._sql["get_candidate"], cluster_id)
                audit = await self._conn.fetch(self._sql["triage_audit"], cluster_id)
            if record is None:
                raise ClusterNotFoundError(f"no rule candidate with cluster_id {cluster_id}")
            return _detail(record, audit)

        return await guarded("read rule candidate", run)

    async def update(
        self,
        cluster_id: UUID,
        change: TriageChange,
        *,
        expected_version: int | None = None,
        actor: str | None = None,
    ) -> TriageOutcome:
        """Apply ``change`` in one transaction, checked under a row lock: the status transition
        (also enforced by the database) and, when given, the version the caller edited.
        ``actor`` is recorded in the audit trail (default: the database login).

        Raises ClusterNotFoundError, VersionConflictError, or transitions.TransitionError naming
        the allowed targets.
        """

        async def run() -> TriageOutcome:
            async with self._conn.transaction():
                if actor is not None:
                    await self._conn.execute(self._sql["act_as"], actor)
                locked = await self._conn.fetchrow(self._sql["lock_candidate"], cluster_id)
                if locked is None:
                    raise ClusterNotFoundError(f"no rule candidate with cluster_id {cluster_id}")
                if expected_version is not None and locked["triage_version"] != expected_version:
                    raise VersionConflictError(
                        cluster_id, expected_version, locked["triage_version"]
                    )
                previous = Status(locked["status"])
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
                audit = await self._conn.fetch(self._sql["triage_audit"], cluster_id)
            if record is None:  # the row is locked by this transaction: it cannot vanish
                raise ClusterNotFoundError(f"no rule candidate with cluster_id {cluster_id}")
            return TriageOutcome(previous, changed, _detail(record, audit))

        try:
            return await guarded("triage rule candidate", run)
        except PermanentError as exc:
            cause = exc.__cause__
            if (
                isinstance(cause, asyncpg.CheckViolationError)
                and cause.constraint_name == _TRANSITION_CONSTRAINT
                and change.status is not None
            ):
                current = await self.get(cluster_id)
                raise TransitionError(current.status, change.status) from exc
            raise


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
        "triage_version": record["triage_version"],
        "summary": record["summary"],
    }


def _statuses(where: ListFilter) -> list[str] | None:
    if where.status is not None:
        return [where.status.value]
    return [s.value for s in where.statuses] or None


def _summary(record: asyncpg.Record) -> CandidateSummary:
    return CandidateSummary(**_summary_fields(record))


def _detail(record: asyncpg.Record, audit: list[asyncpg.Record]) -> CandidateDetail:
    return CandidateDetail(
        **_summary_fields(record),
        snapshot_hash=record["snapshot_hash"],
        notes=record["notes"],
        suggested_rule_stub=record["suggested_rule_stub"],
        evidence_bundle=json.loads(record["evidence_bundle"]),
        audit=tuple(AuditEntry(**{k: v for k, v in r.items() if k != "audit_id"}) for r in audit),
    )


def _json_value(value: Any) -> Any:
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    return value
