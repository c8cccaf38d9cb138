"""The triage inbox over HTTP (ADR-057 D5's tools as endpoints), acting as ``spectral_operator``.

    GET   /clusters                 list_failure_clusters   triage:read
    GET   /clusters/{cluster_id}    get_cluster_detail      triage:read   (ETag: the version)
    PATCH /clusters/{cluster_id}    triage_cluster          triage:write  (If-Match required)

The ETag of a cluster is its ``triage_version`` (bumped by the database on every change of the
operator columns). A PATCH must send ``If-Match`` with the ETag it edited: a cluster changed
since is refused with 412 and the current version, so two operators never overwrite each other
without seeing it (``If-Match: *`` opts out explicitly). Every change lands in the audit trail
with the token's principal.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Final
from uuid import UUID

from fastapi import APIRouter, Depends, Header, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from consumers.rule_candidates.plugin import TRIAGE_READ, TRIAGE_WRITE
from consumers.rule_candidates.transitions import Status, TransitionError
from consumers.rule_candidates.triage import (
    AuditEntry,
    CandidateDetail,
    CandidateSummary,
    ClusterNotFoundError,
    DeletedChange,
    ListFilter,
    Severity,
    Sort,
    TriageChange,
    TriageRepository,
    VersionConflictError,
)
from spectral.api.auth import requires
from spectral.api.conditional import (
    ETAG_HEADER,
    NOT_MODIFIED,
    etag_of,
    not_modified,
    not_modified_response,
    versions_in,
)
from spectral.api.cursor import Cursors, bigint, decimal_text, uuid_text
from spectral.api.problems import COMMON, ProblemError, ProblemType, not_found, responses
from spectral.api.resources import Resources
from spectral.api.text import hidden_characters
from spectral.auth.tokens import Principal

NOTES_MAX_CHARS: Final = 10_000
_CURSOR_KIND: Final = "clusters"

TRANSITION_REFUSED: Final = "transition-refused"
"""The problem type of a triage status change the workflow does not allow."""


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class ClusterSummary(_Out):
    cluster_id: UUID
    status: Status
    severity: Severity
    workspace_id: UUID
    rule_id: UUID
    failure_count: int
    first_observed_at: datetime
    last_observed_at: datetime
    last_signaled_at: datetime
    created_at: datetime
    assigned_to: UUID | None
    resurfaced: bool = Field(description="It came back after the operator's last status change.")
    resurfaced_at: datetime | None
    status_changed_at: datetime | None
    deleted_at: datetime | None
    triage_version: int = Field(description="Bumped on every triage change; the ETag.")
    summary: str | None = Field(
        default=None,
        description="What the cluster is about: its first evidence's summary (at most 300 "
        "characters).",
    )

    @classmethod
    def of(cls, row: CandidateSummary) -> ClusterSummary:
        return cls.model_validate(
            {name: getattr(row, name) for name in cls.model_fields}, from_attributes=False
        )


class FieldChange(_Out):
    from_: Any = Field(alias="from")
    to: Any


class AuditOut(_Out):
    triage_version: int
    changed_at: datetime
    actor: str = Field(description="token:NAME for the API, console and MCP; db:LOGIN otherwise.")
    db_login: str | None = Field(
        description="The database login of the session that made the change (the surface's "
        "own login for the API, console and MCP); null for changes older than this record."
    )
    changes: dict[str, FieldChange] = Field(description="{field: {from, to}} of what changed.")

    @classmethod
    def of(cls, entry: AuditEntry) -> AuditOut:
        return cls.model_validate(entry.to_json())


class EvidenceRef(BaseModel):
    model_config = ConfigDict(extra="allow")
    failure_id: str | None = None
    observed_at: str | None = None
    summary: str | None = None


class HiddenCharacters(_Out):
    """Where text holds characters that are not seen (bidirectional controls, zero-width and
    other format characters, controls): the text is returned as sent; this says where to look."""

    location: str = Field(description='e.g. "notes", "evidence_bundle[0].summary"')
    code_points: list[str] = Field(description='e.g. ["U+202E", "U+200B"]')


class ClusterDetail(ClusterSummary):
    snapshot_hash: str
    notes: str | None
    suggested_rule_stub: str | None
    evidence_bundle: list[EvidenceRef]
    allowed_statuses: list[Status] = Field(description="Statuses it may move to from here.")
    audit: list[AuditOut] = Field(description="Every triage change, oldest first.")
    hidden_characters: list[HiddenCharacters] = Field(
        default_factory=list,
        description="Text of this cluster holding characters that are not seen (e.g. U+202E "
        "RIGHT-TO-LEFT OVERRIDE, U+200B ZERO WIDTH SPACE): show them, never render them "
        "silently. Empty when there is none.",
    )

    @classmethod
    def of_detail(cls, detail: CandidateDetail) -> ClusterDetail:
        from consumers.rule_candidates.transitions import allowed_from  # noqa: PLC0415

        base = {name: getattr(detail, name) for name in ClusterSummary.model_fields}
        evidence = [
            e if isinstance(e, dict) else {"summary": str(e)} for e in detail.evidence_bundle
        ]
        return cls.model_validate(
            {
                **base,
                "snapshot_hash": detail.snapshot_hash,
                "notes": detail.notes,
                "suggested_rule_stub": detail.suggested_rule_stub,
                "evidence_bundle": evidence,
                "allowed_statuses": list(allowed_from(detail.status)),
                "audit": [AuditOut.of(a).model_dump(by_alias=True) for a in detail.audit],
                "hidden_characters": list(hidden_characters(detail.texts())),
            }
        )


class ClusterPage(_Out):
    clusters: list[ClusterSummary]
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page; null: last.")


class TriageIn(BaseModel):
    """Only the fields present are changed; ``null`` clears assigned_to or notes."""

    model_config = ConfigDict(extra="forbid")

    status: Status | None = None
    assigned_to: UUID | None = None
    notes: Annotated[str, Field(max_length=NOTES_MAX_CHARS)] | None = None
    deleted: bool | None = Field(default=None, description="true: soft-delete; false: restore.")


def parse_if_match(value: str | None) -> int | None:
    """The version named by If-Match (None for ``*``); 428 when absent, 412 when unusable."""
    if value is None or not value.strip():
        raise ProblemError(
            428,
            "send If-Match with the ETag of the cluster you edited (or '*' to overwrite)",
            slug=ProblemType.IF_MATCH_REQUIRED,
        )
    wildcard, versions = versions_in(value, strong_only=True)
    if wildcard:
        return None
    if versions:
        return versions[0]
    raise ProblemError(
        412, "If-Match names no version of this cluster", slug=ProblemType.STALE_VERSION
    )


def to_change(body: TriageIn) -> TriageChange:
    given = body.model_fields_set
    deleted: DeletedChange = "keep"
    if "deleted" in given and body.deleted is not None:
        deleted = "delete" if body.deleted else "restore"
    change = TriageChange(
        status=body.status if "status" in given else None,
        change_assignee="assigned_to" in given,
        assignee=body.assigned_to,
        change_notes="notes" in given,
        notes=body.notes or None,
        deleted=deleted,
    )
    if change.is_empty:
        raise ProblemError(
            422,
            "nothing to change: give status, assigned_to, notes or deleted",
            slug=ProblemType.INVALID_REQUEST,
            title="Invalid request",
            invalid_params=[{"location": ["body"], "message": "no field given", "type": "empty"}],
        )
    return change


def refused_transition(exc: TransitionError) -> ProblemError:
    return ProblemError(
        409,
        str(exc),
        slug=TRANSITION_REFUSED,
        current_status=exc.current.value,
        allowed_statuses=[s.value for s in exc.allowed],
    )


def stale(exc: VersionConflictError) -> ProblemError:
    return ProblemError(
        412,
        str(exc),
        slug=ProblemType.STALE_VERSION,
        headers={"ETag": etag_of(exc.current)},
        current_version=exc.current,
    )


def decode_page_cursor(
    cursors: Cursors, cursor: str | None, sort: Sort, kind: str = _CURSOR_KIND
) -> tuple[int, str, UUID] | None:
    """The inbox keyset (k1, k2, cluster_id) of a cursor of listing ``kind`` in ``sort``; 400
    invalid-cursor for anything list_candidates could not have written."""
    if cursor is None:
        return None
    k1, k2, cid = cursors.decode_keyset(
        cursor, f"{kind}:{sort.value}", bigint, decimal_text, uuid_text
    )
    return (k1, k2, cid)


def encode_page_cursor(
    cursors: Cursors, key: tuple[int, str, UUID] | None, sort: Sort, kind: str = _CURSOR_KIND
) -> str | None:
    """The cursor of the page after ``key`` (None: there is none)."""
    if key is None:
        return None
    k1, k2, cid = key
    return cursors.encode(f"{kind}:{sort.value}", [k1, k2, str(cid)])


async def load_page(resources: Resources, where: ListFilter) -> ClusterPage:
    """One page of the inbox as the API, the console and the MCP tools answer it."""
    async with resources.operator.acquire() as conn:
        page = await TriageRepository(conn).page(where)
    next_cursor = encode_page_cursor(resources.cursors, page.next_key, where.sort)
    return ClusterPage(clusters=[ClusterSummary.of(r) for r in page.rows], next_cursor=next_cursor)


async def load_detail(resources: Resources, cluster_id: UUID) -> CandidateDetail:
    """Raises ClusterNotFoundError."""
    async with resources.operator.acquire() as conn:
        return await TriageRepository(conn).get(cluster_id)


async def apply_triage(
    resources: Resources,
    cluster_id: UUID,
    change: TriageChange,
    *,
    expected_version: int | None,
    actor: str,
) -> CandidateDetail:
    """Raises ClusterNotFoundError, VersionConflictError, TransitionError."""
    async with resources.operator.acquire() as conn:
        outcome = await TriageRepository(conn).update(
            cluster_id, change, expected_version=expected_version, actor=actor
        )
    return outcome.candidate


def router(resources: Resources) -> APIRouter:
    api = APIRouter(tags=["triage"])
    reader = Depends(requires(resources, TRIAGE_READ))
    writer = Depends(requires(resources, TRIAGE_WRITE))

    @api.get(
        "/clusters",
        summary="List failure clusters (the triage inbox), filtered, sorted and paged.",
        responses=responses(*COMMON),
    )
    async def list_failure_clusters(
        *,
        _: Principal = reader,
        status: Status | None = None,
        severity: Severity | None = None,
        workspace_id: UUID | None = None,
        assignee: Annotated[
            UUID | None, Query(description="Only clusters assigned to this user id.")
        ] = None,
        unassigned: Annotated[bool, Query(description="Only clusters nobody is assigned.")] = False,
        resurfaced: Annotated[
            bool, Query(description="Only clusters that came back after their last triage.")
        ] = False,
        include_deleted: bool = False,
        sort: Sort = Sort.SEVERITY,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
        cursor: Annotated[str | None, Query(max_length=512)] = None,
    ) -> ClusterPage:
        where = ListFilter(
            status=status,
            severity=severity,
            workspace_id=workspace_id,
            resurfaced_only=resurfaced,
            include_deleted=include_deleted,
            limit=limit,
            assignee=assignee,
            unassigned_only=unassigned,
            sort=sort,
            after=decode_page_cursor(resources.cursors, cursor, sort),
        )
        return await load_page(resources, where)

    @api.get(
        "/clusters/{cluster_id}",
        summary="One cluster: snapshot, evidence, triage state and its audit trail.",
        response_model=ClusterDetail,
        responses={200: {"headers": ETAG_HEADER}, **NOT_MODIFIED, **responses(*COMMON, 404)},
    )
    async def get_cluster_detail(
        *,
        cluster_id: UUID,
        response: Response,
        _: Principal = reader,
        if_none_match: Annotated[
            str | None,
            Header(description='An ETag you hold, e.g. "3": 304 while it is still current.'),
        ] = None,
    ) -> Any:
        try:
            detail = await load_detail(resources, cluster_id)
        except ClusterNotFoundError as exc:
            raise not_found(str(exc)) from None
        if not_modified(if_none_match, detail.triage_version):
            return not_modified_response(detail.triage_version)
        response.headers["ETag"] = etag_of(detail.triage_version)
        return ClusterDetail.of_detail(detail)

    @api.patch(
        "/clusters/{cluster_id}",
        summary="Triage a cluster: status, assignee, notes, soft delete (If-Match required).",
        responses={
            200: {"headers": ETAG_HEADER},
            **responses(*COMMON, 404, 409, 412, 428),
        },
    )
    async def triage_cluster(
        *,
        cluster_id: UUID,
        body: TriageIn,
        response: Response,
        principal: Principal = writer,
        if_match: Annotated[
            str | None,
            Header(description='The ETag you edited, e.g. "3"; * to overwrite whatever it is.'),
        ] = None,
    ) -> ClusterDetail:
        expected = parse_if_match(if_match)
        change = to_change(body)
        try:
            detail = await apply_triage(
                resources, cluster_id, change, expected_version=expected, actor=principal.actor
            )
        except ClusterNotFoundError as exc:
            raise not_found(str(exc)) from None
        except VersionConflictError as exc:
            raise stale(exc) from None
        except TransitionError as exc:
            raise refused_transition(exc) from None
        response.headers["ETag"] = etag_of(detail.triage_version)
        return ClusterDetail.of_detail(detail)

    return api
