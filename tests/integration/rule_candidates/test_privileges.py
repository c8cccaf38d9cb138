"""The database itself keeps the projection and the operators in their own columns."""

from __future__ import annotations

import uuid
from uuid import UUID

import asyncpg
import pytest

from tests.integration.rule_candidates.helpers import connected

pytestmark = pytest.mark.integration

OPERATOR_COLUMNS = {
    "status": "'resolved'",
    "assigned_to": "gen_random_uuid()",
    "notes": "'x'",
    "deleted_at": "now()",
}
SNAPSHOT_COLUMNS = {
    "snapshot_hash": "'f' || snapshot_hash",
    "rule_id": "gen_random_uuid()",
    "workspace_id": "gen_random_uuid()",
    "severity": "'high'",
    "failure_count": "failure_count + 1",
    "first_observed_at": "now()",
    "last_observed_at": "now()",
    "evidence_bundle": "'[]'::jsonb",
    "suggested_rule_stub": "'stub'",
    "last_signaled_at": "now()",
    "resurfaced_at": "now()",
    "created_at": "now()",
    "cluster_id": "gen_random_uuid()",
}

_INSERT = """
INSERT INTO platform.rule_candidates_pending
    (cluster_id, snapshot_hash, rule_id, workspace_id, severity, failure_count,
     first_observed_at, last_observed_at, evidence_bundle)
VALUES ($1, repeat('a', 32), gen_random_uuid(), gen_random_uuid(), 'low', 1, now(), now(), '[]')
"""


async def _seed(database_url: str) -> UUID:
    cluster = uuid.uuid4()
    async with connected(database_url, None) as conn:
        await conn.execute(_INSERT, cluster)
    return cluster


@pytest.mark.parametrize(("column", "value"), sorted(OPERATOR_COLUMNS.items()))
async def test_the_projector_cannot_update_operator_columns(
    database_url: str, column: str, value: str
) -> None:
    cluster = await _seed(database_url)
    async with connected(database_url, "spectral_projector") as conn:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute(
                f"UPDATE platform.rule_candidates_pending SET {column} = {value} "
                "WHERE cluster_id = $1",
                cluster,
            )


async def test_the_projector_cannot_insert_a_triaged_row(database_url: str) -> None:
    async with connected(database_url, "spectral_projector") as conn:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute(
                _INSERT.replace("evidence_bundle)", "evidence_bundle, status)").replace(
                    "'[]')", "'[]', 'dismissed')"
                ),
                uuid.uuid4(),
            )
        await conn.execute(_INSERT, uuid.uuid4())  # snapshot columns only: allowed


async def test_the_projector_cannot_delete_or_truncate(database_url: str) -> None:
    cluster = await _seed(database_url)
    async with connected(database_url, "spectral_projector") as conn:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute(
                "DELETE FROM platform.rule_candidates_pending WHERE cluster_id = $1", cluster
            )
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("TRUNCATE platform.rule_candidates_pending")


@pytest.mark.parametrize(("column", "value"), sorted(SNAPSHOT_COLUMNS.items()))
async def test_the_operator_cannot_update_snapshot_columns(
    database_url: str, column: str, value: str
) -> None:
    cluster = await _seed(database_url)
    async with connected(database_url, "spectral_operator") as conn:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute(
                f"UPDATE platform.rule_candidates_pending SET {column} = {value} "
                "WHERE cluster_id = $1",
                cluster,
            )


async def test_the_operator_cannot_insert_or_delete(database_url: str) -> None:
    cluster = await _seed(database_url)
    async with connected(database_url, "spectral_operator") as conn:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute(_INSERT, uuid.uuid4())
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute(
                "DELETE FROM platform.rule_candidates_pending WHERE cluster_id = $1", cluster
            )
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("DELETE FROM platform.cluster_signal_hours")


async def test_the_operator_writes_its_columns_and_the_change_is_stamped(database_url: str) -> None:
    cluster = await _seed(database_url)
    assignee = uuid.uuid4()
    async with connected(database_url, "spectral_operator") as conn:
        await conn.execute(
            "UPDATE platform.rule_candidates_pending SET status = 'in_review', assigned_to = $2,"
            " notes = 'mine', deleted_at = NULL WHERE cluster_id = $1",
            cluster,
            assignee,
        )
        stamped = await conn.fetchrow(
            "SELECT status, assigned_to, notes, status_changed_at"
            " FROM platform.rule_candidates_pending WHERE cluster_id = $1",
            cluster,
        )
        assert stamped is not None
        assert tuple(stamped)[:3] == ("in_review", assignee, "mine")
        assert stamped["status_changed_at"] is not None
        # Notes alone do not count as a status change.
        await conn.execute(
            "UPDATE platform.rule_candidates_pending SET notes = 'more' WHERE cluster_id = $1",
            cluster,
        )
        again = await conn.fetchval(
            "SELECT status_changed_at FROM platform.rule_candidates_pending WHERE cluster_id = $1",
            cluster,
        )
        assert again == stamped["status_changed_at"]


async def test_the_projector_records_and_prunes_signal_hours(database_url: str) -> None:
    async with connected(database_url, "spectral_projector") as conn:
        await conn.execute(
            "INSERT INTO platform.cluster_signal_hours VALUES (date_trunc('hour', now()), $1)",
            uuid.uuid4(),
        )
        await conn.execute("DELETE FROM platform.cluster_signal_hours")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("UPDATE platform.cluster_signal_hours SET hour = now()")
