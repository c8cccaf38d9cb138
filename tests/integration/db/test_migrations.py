from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Final

import asyncpg
import pytest

from spectral.db.migrate import MIGRATIONS_DIR, discover, migrate
from spectral.devstack import Endpoints
from spectral.errors import PermanentError
from tests.support import unique_name, with_database

pytestmark = pytest.mark.integration


async def _fresh_database(admin_url: str) -> tuple[str, str]:
    name = unique_name("spectral_m_")
    admin = await asyncpg.connect(with_database(admin_url, "postgres"))
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    return name, with_database(admin_url, name)


async def test_migrating_twice_is_a_no_op(stack: Endpoints) -> None:
    _, url = await _fresh_database(stack.database_url)
    first = await migrate(url)
    second = await migrate(url)
    assert len(first.applied) == len(discover())
    assert second.applied == ()
    assert len(second.already) == len(first.applied)


async def test_two_migrators_at_once_apply_each_file_once(stack: Endpoints) -> None:
    _, url = await _fresh_database(stack.database_url)
    one, two = await asyncio.gather(migrate(url), migrate(url))
    assert sorted(one.applied + two.applied) == sorted(
        f"{m.version:04d}_{m.name}" for m in discover()
    )
    conn = await asyncpg.connect(url)
    try:
        count = await conn.fetchval("SELECT count(*) FROM core.schema_migrations")
    finally:
        await conn.close()
    assert count == len(discover())


async def test_an_edited_migration_is_refused(stack: Endpoints, tmp_path: Path) -> None:
    _, url = await _fresh_database(stack.database_url)
    for path in MIGRATIONS_DIR.iterdir():
        (tmp_path / path.name).write_text(path.read_text())
    await migrate(url, tmp_path)
    first = min(tmp_path.glob("*.sql"))
    first.write_text(first.read_text() + "\n-- edited\n")
    with pytest.raises(PermanentError, match="append-only"):
        await migrate(url, tmp_path)


ROLE_RACE: Final = """
DO $race$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{role}') THEN
        PERFORM pg_sleep(0.5);  -- both databases' migrations have checked before either creates
        CREATE ROLE {role} NOLOGIN;
    END IF;
END
$race$;
"""


async def test_databases_migrated_side_by_side_on_one_server_share_its_roles(
    stack: Endpoints, tmp_path: Path
) -> None:
    """Roles are the server's: two databases' migrations (each under its own database's lock)
    that create the same role at once both succeed, the loser by running its file again."""
    role = unique_name("spectral_race_")
    (tmp_path / "0001_role.sql").write_text(ROLE_RACE.format(role=role))
    urls = [(await _fresh_database(stack.database_url))[1] for _ in range(3)]
    try:
        reports = await asyncio.gather(*(migrate(url, tmp_path) for url in urls))
        assert [r.applied for r in reports] == [("0001_role",)] * len(urls)
    finally:
        admin = await asyncpg.connect(with_database(stack.database_url, "postgres"))
        try:
            await admin.execute(f'DROP ROLE IF EXISTS "{role}"')
        finally:
            await admin.close()
