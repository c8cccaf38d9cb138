"""`spectral triage list | show | set` against a real database, as the operator role."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg
import pytest
from typer.testing import CliRunner, Result

from spectral.cli import app
from spectral.errors import SpectralError
from tests.support import with_database

pytestmark = pytest.mark.integration

WORKSPACE = UUID(int=77)
EVIDENCE = [
    {"failure_id": "scan-1/f-9", "observed_at": "2026-03-01T11:58:00.000000Z", "summary": "R7 x"},
    {"failure_id": "scan-2/f-3", "observed_at": "2026-03-01T11:59:00.000000Z", "summary": "R7 y"},
]


@dataclass(frozen=True)
class Inbox:
    high: UUID  # pending, high
    low: UUID  # in_review, low, other workspace
    back: UUID  # dismissed, then resurfaced
    gone: UUID  # pending, soft-deleted


_INSERT = """
INSERT INTO platform.rule_candidates_pending
    (cluster_id, snapshot_hash, rule_id, workspace_id, severity, failure_count,
     first_observed_at, last_observed_at, evidence_bundle, suggested_rule_stub)
VALUES ($1, repeat('c', 32), $2, $3, $4, $5, '2026-03-01T10:00Z', $6, $7::jsonb, $8)
"""


async def _seed(database_url: str) -> Inbox:
    inbox = Inbox(uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), uuid.uuid4())
    conn = await asyncpg.connect(database_url)
    try:
        rows: list[tuple[Any, ...]] = [
            (inbox.high, WORKSPACE, "high", 40, "2026-03-01T12:00Z", "when R7 fails, flag it"),
            (inbox.low, UUID(int=78), "low", 2, "2026-03-01T12:30Z", None),
            (inbox.back, WORKSPACE, "medium", 9, "2026-03-01T12:10Z", None),
            (inbox.gone, WORKSPACE, "high", 5, "2026-03-01T12:20Z", None),
        ]
        for cluster, workspace, severity, count, last, stub in rows:
            await conn.execute(
                _INSERT,
                cluster,
                UUID(int=5),
                workspace,
                severity,
                count,
                datetime.fromisoformat(last),
                json.dumps(EVIDENCE),
                stub,
            )
        await conn.execute(
            "UPDATE platform.rule_candidates_pending SET status = 'in_review'"
            " WHERE cluster_id = $1",
            inbox.low,
        )
        await conn.execute(
            "UPDATE platform.rule_candidates_pending SET status = 'dismissed'"
            " WHERE cluster_id = $1",
            inbox.back,
        )
        await conn.execute(
            "UPDATE platform.rule_candidates_pending SET resurfaced_at = clock_timestamp()"
            " WHERE cluster_id = $1",
            inbox.back,
        )
        await conn.execute(
            "UPDATE platform.rule_candidates_pending SET deleted_at = now() WHERE cluster_id = $1",
            inbox.gone,
        )
    finally:
        await conn.close()
    return inbox


async def _row(database_url: str, cluster: UUID) -> asyncpg.Record:
    conn = await asyncpg.connect(database_url)
    try:
        record = await conn.fetchrow(
            "SELECT * FROM platform.rule_candidates_pending WHERE cluster_id = $1", cluster
        )
    finally:
        await conn.close()
    assert record is not None
    return record


@pytest.fixture
def inbox(database_url: str) -> Inbox:
    return asyncio.run(_seed(database_url))


def triage(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(app, ["triage", *args], env=env)


def listed(env: dict[str, str], *args: str) -> list[dict[str, Any]]:
    result = triage(env, "list", "--json", *args)
    assert result.exit_code == 0, result.output
    rows: list[dict[str, Any]] = json.loads(result.stdout)
    return rows


def test_list_orders_by_severity_and_hides_deleted(
    inbox: Inbox, spectral_env: dict[str, str]
) -> None:
    rows = listed(spectral_env)
    assert [r["cluster_id"] for r in rows] == [str(inbox.high), str(inbox.back), str(inbox.low)]
    assert rows[0]["status"] == "pending"
    assert rows[0]["severity"] == "high"
    assert rows[0]["failure_count"] == 40
    with_deleted = listed(spectral_env, "--include-deleted")
    assert str(inbox.gone) in {r["cluster_id"] for r in with_deleted}


def test_list_filters(inbox: Inbox, spectral_env: dict[str, str]) -> None:
    def ids(*args: str) -> set[str]:
        return {r["cluster_id"] for r in listed(spectral_env, *args)}

    assert ids("--status", "in_review") == {str(inbox.low)}
    assert ids("--severity", "medium") == {str(inbox.back)}
    assert ids("--workspace", str(WORKSPACE)) == {str(inbox.high), str(inbox.back)}
    assert ids("--resurfaced") == {str(inbox.back)}
    assert ids("--status", "resolved") == set()


def test_list_prints_a_table(inbox: Inbox, spectral_env: dict[str, str]) -> None:
    result = triage(spectral_env, "list")
    assert result.exit_code == 0, result.output
    assert str(inbox.high) in result.stdout
    assert "resurfaced" in result.stdout
    assert "rule candidates (3)" in result.stdout


def test_an_unknown_filter_value_is_refused(inbox: Inbox, spectral_env: dict[str, str]) -> None:
    result = triage(spectral_env, "list", "--status", "closed")
    assert result.exit_code == 2
    assert "closed" in result.output


def test_show_gives_snapshot_evidence_and_triage_state(
    inbox: Inbox, spectral_env: dict[str, str]
) -> None:
    result = triage(spectral_env, "show", str(inbox.high), "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["cluster_id"] == str(inbox.high)
    assert shown["evidence_bundle"] == EVIDENCE
    assert shown["suggested_rule_stub"] == "when R7 fails, flag it"
    assert shown["snapshot_hash"] == "c" * 32
    assert (shown["status"], shown["assigned_to"], shown["notes"]) == ("pending", None, None)
    assert shown["resurfaced"] is False

    text = triage(spectral_env, "show", str(inbox.back))
    assert text.exit_code == 0, text.output
    assert "scan-2/f-3" in text.stdout
    assert "dismissed" in text.stdout
    assert "yes, at" in text.stdout  # resurfaced


def test_show_an_unknown_cluster(inbox: Inbox, spectral_env: dict[str, str]) -> None:
    missing = uuid.uuid4()
    result = triage(spectral_env, "show", str(missing))
    assert result.exit_code == 1
    assert f"no rule candidate with cluster_id {missing}" in result.output


def test_set_status_assignee_and_notes(
    inbox: Inbox, spectral_env: dict[str, str], database_url: str
) -> None:
    person = uuid.uuid4()
    result = triage(
        spectral_env,
        "set",
        str(inbox.high),
        "--status",
        "in_review",
        "--assignee",
        str(person),
        "--notes",
        "checking R7 on workspace 77",
    )
    assert result.exit_code == 0, result.output
    assert f"cluster {inbox.high}: pending -> in_review, assigned to {person}" in result.stdout
    stored = asyncio.run(_row(database_url, inbox.high))
    assert (stored["status"], stored["assigned_to"]) == ("in_review", person)
    assert stored["notes"] == "checking R7 on workspace 77"
    assert stored["snapshot_hash"] == "c" * 32

    cleared = triage(spectral_env, "set", str(inbox.high), "--unassign", "--notes", "")
    assert cleared.exit_code == 0, cleared.output
    assert "in_review (unchanged), assigned to nobody" in cleared.stdout
    stored = asyncio.run(_row(database_url, inbox.high))
    assert (stored["assigned_to"], stored["notes"]) == (None, None)


def test_a_refused_transition_names_the_allowed_ones(
    inbox: Inbox, spectral_env: dict[str, str], database_url: str
) -> None:
    result = triage(spectral_env, "set", str(inbox.back), "--status", "resolved", "--notes", "x")
    assert result.exit_code == 1
    assert "cannot move a cluster from dismissed to resolved" in result.output
    assert "allowed from dismissed: pending, in_review" in result.output
    stored = asyncio.run(_row(database_url, inbox.back))
    assert (stored["status"], stored["notes"]) == ("dismissed", None)  # nothing written


def test_reopening_a_resurfaced_cluster_takes_it_out_of_the_resurfaced_view(
    inbox: Inbox, spectral_env: dict[str, str]
) -> None:
    result = triage(spectral_env, "set", str(inbox.back), "--status", "in_review")
    assert result.exit_code == 0, result.output
    assert "dismissed -> in_review" in result.stdout
    assert listed(spectral_env, "--resurfaced") == []


def test_soft_delete_and_restore(inbox: Inbox, spectral_env: dict[str, str]) -> None:
    assert triage(spectral_env, "set", str(inbox.low), "--delete").exit_code == 0
    assert str(inbox.low) not in {r["cluster_id"] for r in listed(spectral_env)}
    assert triage(spectral_env, "set", str(inbox.gone), "--restore").exit_code == 0
    assert str(inbox.gone) in {r["cluster_id"] for r in listed(spectral_env)}


def test_set_needs_something_to_change(inbox: Inbox, spectral_env: dict[str, str]) -> None:
    result = triage(spectral_env, "set", str(inbox.high))
    assert result.exit_code == 1
    assert "nothing to change" in result.output
    missing = triage(spectral_env, "set", str(uuid.uuid4()), "--status", "dismissed")
    assert missing.exit_code == 1
    assert "no rule candidate" in missing.output


def test_the_operator_database_url_wins_when_set(
    inbox: Inbox, spectral_env: dict[str, str], database_url: str
) -> None:
    env = {**spectral_env, "SPECTRAL_OPERATOR_DATABASE_URL": with_database(database_url, "nope")}
    result = triage(env, "list")
    assert isinstance(result.exception, SpectralError)
    assert "nope" in str(result.exception)


def test_show_lists_the_audit_trail_and_set_refuses_a_stale_version(
    inbox: Inbox, spectral_env: dict[str, str], database_url: str
) -> None:
    first = triage(spectral_env, "set", str(inbox.high), "--notes", "one", "--expect-version", "0")
    assert first.exit_code == 0, first.output
    stale = triage(spectral_env, "set", str(inbox.high), "--notes", "two", "--expect-version", "0")
    assert stale.exit_code == 1
    assert "not 0: someone changed it meanwhile" in stale.output
    assert asyncio.run(_row(database_url, inbox.high))["notes"] == "one"
    shown = triage(spectral_env, "show", str(inbox.high), "--json")
    detail = json.loads(shown.stdout)
    assert detail["triage_version"] == 1
    assert detail["audit"] == [
        {
            "triage_version": 1,
            "changed_at": detail["audit"][0]["changed_at"],
            "actor": detail["audit"][0]["actor"],
            "db_login": detail["audit"][0]["actor"].removeprefix("db:"),
            "changes": {"notes": {"from": None, "to": "one"}},
        }
    ]
    assert detail["audit"][0]["actor"].startswith("db:")
    text = triage(spectral_env, "show", str(inbox.high))
    assert "audit trail (1)" in text.stdout
    assert "notes: - -> one" in text.stdout
