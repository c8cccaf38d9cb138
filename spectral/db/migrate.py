"""Append-only migrations: ``schemas/sql/NNNN_name.sql`` applied in order, once each.

The files are read as package resources (spectral/resources.py), so an installed wheel finds
them as a checkout does; finding none is an error, never "0 applied".

Each file runs in its own transaction and is recorded in ``core.schema_migrations`` with a
checksum; a recorded file whose content changed afterwards is refused (migrations are
append-only). A transaction-scoped advisory lock serialises concurrent runners, so two
processes migrating at once apply every file exactly once.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib.resources.abc import Traversable

import asyncpg

from spectral import resources
from spectral.db.connect import connect, translate
from spectral.errors import ConfigurationError, PermanentError, SpectralError

MIGRATIONS_DIR: Traversable = resources.migrations()
_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_LOCK_KEY = 0x5350454354524C  # "SPECTRL": one advisory lock key for every migrator

_BOOTSTRAP = """
CREATE SCHEMA IF NOT EXISTS core;
CREATE TABLE IF NOT EXISTS core.schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
"""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


@dataclass(frozen=True)
class MigrationReport:
    applied: tuple[str, ...]
    already: tuple[str, ...]


def discover(directory: Traversable = MIGRATIONS_DIR) -> list[Migration]:
    """The migrations in ``directory``, ordered, with gaps and duplicates refused; none at all
    is a broken installation (ConfigurationError), not an empty schema."""
    found: list[Migration] = []
    entries = sorted(directory.iterdir(), key=lambda e: e.name) if directory.is_dir() else []
    for entry in entries:
        if not entry.name.endswith(".sql"):
            continue
        match = _FILE.match(entry.name)
        if not match:
            raise PermanentError(f"{entry.name}: migrations are named NNNN_lowercase_name.sql")
        found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    if not found:
        raise ConfigurationError(
            f"no migrations found in {directory}: the installation is incomplete (the "
            "spectral_schemas package ships schemas/sql); reinstall spectral"
        )
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise PermanentError(f"migration numbers must run 1..N without gaps, found {versions}")
    return found


async def migrate(dsn: str, directory: Traversable = MIGRATIONS_DIR) -> MigrationReport:
    """Apply every pending migration; return what was applied and what was already there."""
    migrations = discover(directory)
    conn = await connect(dsn)
    try:
        return await _migrate(conn, migrations)
    except SpectralError:
        raise
    except asyncpg.PostgresError as exc:
        raise translate(exc, "migrate") from exc
    finally:
        await conn.close()


async def _migrate(conn: asyncpg.Connection, migrations: list[Migration]) -> MigrationReport:
    applied: list[str] = []
    already: list[str] = []
    for migration in migrations:
        label = f"{migration.version:04d}_{migration.name}"
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY)
            await conn.execute(_BOOTSTRAP)
            recorded = await conn.fetchval(
                "SELECT checksum FROM core.schema_migrations WHERE version = $1",
                migration.version,
            )
            if recorded is not None:
                if recorded != migration.checksum:
                    raise PermanentError(
                        f"migration {label} changed after it was applied; migrations are "
                        "append-only: revert the edit and add a new migration instead"
                    )
                already.append(label)
                continue
            await conn.execute(migration.sql)
            await conn.execute(
                "INSERT INTO core.schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                migration.version,
                migration.name,
                migration.checksum,
            )
            applied.append(label)
    return MigrationReport(tuple(applied), tuple(already))
