"""Scopes are declared by plugins: a token is made only with registered ones, the database keeps
only their shape (migration 0019), and a stored scope nobody registers allows nothing."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Final

import asyncpg
import pytest

from consumers.rule_candidates.plugin import TRIAGE_READ
from producers.work.plugin import WORK_READ, WORK_SUBMIT
from spectral import declaration
from spectral.auth.tokens import TOKEN_ADMIN_ROLE, TokenAdmin, TokenVerifier
from spectral.db.connect import connect
from spectral.errors import PermanentError

pytestmark = pytest.mark.integration

ROOT: Final = Path(__file__).resolve().parents[3]
MIGRATION: Final = ROOT / "schemas" / "sql" / "0019_token_scopes_by_shape.sql"


def test_the_database_checks_the_shape_the_declaration_states() -> None:
    one = declaration._SCOPE.pattern
    assert f"'^{one}( {one})*$'" in MIGRATION.read_text("utf-8")


@pytest.mark.parametrize(
    "scopes",
    [[], ["admin"], ["Work:read"], ["work:read", None], ["work: read"], ["a" * 40 + ":read"]],
    ids=repr,
)
async def test_the_database_refuses_a_scope_of_the_wrong_shape(
    database_url: str, scopes: list[str | None]
) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute(
                "INSERT INTO core.api_tokens (token_id, name, token_hash, display_prefix, scopes)"
                " VALUES ($1, 'shape', repeat('a', 64), 'sha256:aaaaaaaa', $2)",
                uuid.uuid4(),
                scopes,
            )
    finally:
        await conn.close()


async def test_a_token_is_made_with_registered_scopes_only(database_url: str) -> None:
    admin = await connect(database_url, role=TOKEN_ADMIN_ROLE)
    try:
        tokens = TokenAdmin(admin)
        with pytest.raises(PermanentError, match="unknown scope 'notes:read'"):
            await tokens.create("unregistered", ["notes:read"])
        made = await tokens.create("registered", [WORK_SUBMIT, TRIAGE_READ.name])
    finally:
        await admin.close()
    assert made.info.scopes == ("triage:read", "work:submit")


async def test_a_stored_scope_nobody_registers_allows_nothing(database_url: str) -> None:
    admin = await connect(database_url, role=TOKEN_ADMIN_ROLE)
    try:
        made = await TokenAdmin(admin).create("soon-orphaned", [WORK_READ])
    finally:
        await admin.close()
    owner = await asyncpg.connect(database_url)
    try:  # the scope of a plugin since uninstalled: well shaped, registered by nobody
        await owner.execute(
            "UPDATE core.api_tokens SET scopes = scopes || '{notes:read}' WHERE name = $1",
            "soon-orphaned",
        )
    finally:
        await owner.close()
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=1)
    try:
        principal = await TokenVerifier(pool).verify(made.token)
    finally:
        await pool.close()
    assert principal is not None
    assert principal.scopes == {WORK_READ.name}
