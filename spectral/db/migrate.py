"""Append-only migrations: spectral's track, then each plugin's, applied in order, once each.

spectral's track is ``schemas/sql/NNNN_name.sql``, read as package resources
(spectral/resources.py), so an installed wheel finds it as a checkout does; finding none is an
error, never "0 applied". Each plugin's track is the folder its ``spectral.migrations`` entry
point names (spectral/plugins.py): numbered 1..N on its own, recorded apart from spectral's
(``core.plugin_migrations``), applied after spectral's track, plugin by plugin in name order.

Each file runs in its own transaction and is recorded with a checksum; a recorded file whose
content changed afterwards is refused (migrations are append-only). A transaction-scoped
advisory lock serialises concurrent runners, so two processes migrating at once apply every
file exactly once. Roles are the cluster's, not a database's: a migration that meets a role
created meanwhile by a migration of another database on the same server (two tenants, or test
databases migrated side by side, each under its own database's lock) runs again, and then finds
the role there.

A plugin can never edit or shadow spectral's migrations: its files are numbered and recorded
on its own track, and each of its migrations runs between two digests of everything spectral
owns (the objects of spectral's schemas, their privileges and policies, spectral's migration
record; migrate.sql ``spectral_fingerprint``) and of the consumer registrations
(``core.consumer_roles``, to which it may only add): a migration that changes any of it is
rolled back and refused. A plugin keeps its objects in schemas of its own and reaches
spectral's through membership in spectral's roles (``spectral_consumer``,
``spectral_outbox_writer``, ...), never by changing spectral's grants.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Final

import asyncpg

from spectral import resources
from spectral.db.connect import connect, translate
from spectral.db.locks import MIGRATION_KEY
from spectral.db.queries import load_queries
from spectral.errors import ConfigurationError, PermanentError, SpectralError
from spectral.plugins import SPECTRAL, MigrationTrack, installed_migration_tracks

MIGRATIONS_DIR: Traversable = resources.migrations()
SPECTRAL_SCHEMAS: Final = ("clusters", "core", "platform", "work")
"""The schemas spectral's migrations create: no plugin migration may change what is in them
(a test keeps this list equal to what spectral's track creates)."""
_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_SQL: Final = load_queries(Path(__file__).with_name("migrate.sql"))
_ROLE_RACE_ATTEMPTS: Final = 5
"""How often one file runs while other databases' migrations keep creating the same roles."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def label(self) -> str:
        return f"{self.version:04d}_{self.name}"

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


@dataclass(frozen=True)
class TrackReport:
    """One plugin's track: what was applied now and what was there already."""

    plugin: str
    applied: tuple[str, ...]
    already: tuple[str, ...]


@dataclass(frozen=True)
class MigrationReport:
    applied: tuple[str, ...]
    """spectral's migrations applied now."""
    already: tuple[str, ...]
    plugins: tuple[TrackReport, ...] = ()


def discover(directory: Traversable = MIGRATIONS_DIR, track: str = SPECTRAL) -> list[Migration]:
    """The migrations in ``directory``, ordered, with gaps and duplicates refused; none at all
    is a broken installation (ConfigurationError), not an empty schema."""
    found: list[Migration] = []
    entries = sorted(directory.iterdir(), key=lambda e: e.name) if directory.is_dir() else []
    for entry in entries:
        if not entry.name.endswith(".sql"):
            continue
        match = _FILE.match(entry.name)
        if not match:
            raise PermanentError(
                f"{track}: {entry.name}: migrations are named NNNN_lowercase_name.sql"
            )
        found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    if not found:
        package = "the spectral_schemas package ships schemas/sql" if track == SPECTRAL else ""
        raise ConfigurationError(
            f"no migrations found for {track} in {directory}: the installation is incomplete"
            + (f" ({package}); reinstall spectral" if package else "")
        )
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise PermanentError(
            f"{track}: migration numbers must run 1..N without gaps, found {versions}"
        )
    return found


async def migrate(
    dsn: str,
    directory: Traversable = MIGRATIONS_DIR,
    plugins: Sequence[MigrationTrack] | None = None,
) -> MigrationReport:
    """Apply every pending migration of spectral's track (``directory``), then of each plugin
    track; return what was applied and what was already there.

    ``plugins``: the installed plugins' tracks when ``directory`` is spectral's own migrations,
    none otherwise (a partial track, as a conversion test builds, leaves plugins alone)."""
    migrations = discover(directory)
    if plugins is None:
        plugins = installed_migration_tracks() if directory is MIGRATIONS_DIR else ()
    tracks = [(t.plugin, discover(t.directory, t.plugin)) for t in sorted(plugins, key=_name)]
    conn = await connect(dsn)
    try:
        applied, already = await _spectral_track(conn, migrations)
        reports = [await _plugin_track(conn, plugin, files) for plugin, files in tracks]
    except SpectralError:
        raise
    except asyncpg.PostgresError as exc:
        raise translate(exc, "migrate") from exc
    finally:
        await conn.close()
    return MigrationReport(applied, already, tuple(reports))


def _name(track: MigrationTrack) -> str:
    return track.plugin


async def _spectral_track(
    conn: asyncpg.Connection, migrations: list[Migration]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    applied: list[str] = []
    already: list[str] = []
    for migration in migrations:

        async def apply(migration: Migration = migration) -> bool:
            await conn.execute(_SQL["lock"], MIGRATION_KEY)
            await conn.execute(_SQL["bootstrap"])
            recorded = await conn.fetchval(_SQL["spectral_checksum"], migration.version)
            if recorded is not None:
                _check_unchanged(SPECTRAL, migration, recorded)
                return False
            await conn.execute(migration.sql)
            await conn.execute(
                _SQL["record_spectral"], migration.version, migration.name, migration.checksum
            )
            return True

        (applied if await _in_transaction(conn, apply) else already).append(migration.label)
    return tuple(applied), tuple(already)


async def _plugin_track(
    conn: asyncpg.Connection, plugin: str, migrations: list[Migration]
) -> TrackReport:
    applied: list[str] = []
    already: list[str] = []
    for migration in migrations:

        async def apply(migration: Migration = migration) -> bool:
            await conn.execute(_SQL["lock"], MIGRATION_KEY)
            if not await conn.fetchval(_SQL["plugin_record_exists"]):
                raise ConfigurationError(
                    f"plugin {plugin}: spectral's migrations are not all applied (no "
                    "core.plugin_migrations); migrate spectral's track first"
                )
            recorded = await conn.fetchval(_SQL["plugin_checksum"], plugin, migration.version)
            if recorded is not None:
                _check_unchanged(plugin, migration, recorded)
                return False
            before = await _fingerprint(conn)
            await conn.execute(migration.sql)
            after = await _fingerprint(conn)
            _check_spectral_untouched(plugin, migration, before, after)
            await conn.execute(
                _SQL["record_plugin"], plugin, migration.version, migration.name, migration.checksum
            )
            return True

        (applied if await _in_transaction(conn, apply) else already).append(migration.label)
    return TrackReport(plugin, tuple(applied), tuple(already))


async def _in_transaction(conn: asyncpg.Connection, apply: Callable[[], Awaitable[bool]]) -> bool:
    """``apply`` in a transaction of its own, run again (from a clean slate: the failed
    transaction is rolled back) when it lost a race for a role to another database's migration.
    The advisory lock is the database's; roles and their memberships are the server's."""
    for attempt in range(1, _ROLE_RACE_ATTEMPTS + 1):
        try:
            async with conn.transaction():
                return await apply()
        except asyncpg.PostgresError as exc:
            if attempt == _ROLE_RACE_ATTEMPTS or not _lost_role_race(exc):
                raise
    raise AssertionError  # the last attempt returns or raises


def _lost_role_race(exc: asyncpg.PostgresError) -> bool:
    """A role (or a membership) another database's migration created between this one's
    ``IF NOT EXISTS`` check and its ``CREATE``: the unique index of the cluster's catalog refuses
    the second, or the row the two both changed was updated concurrently."""
    if isinstance(exc, asyncpg.UniqueViolationError):
        return (exc.constraint_name or "").startswith("pg_auth")
    if isinstance(exc, asyncpg.DuplicateObjectError):
        return "role" in str(exc)
    return isinstance(exc, asyncpg.InternalServerError) and "concurrently" in str(exc)


@dataclass(frozen=True)
class _Fingerprint:
    digest: str
    registrations: frozenset[tuple[str, str]]


async def _fingerprint(conn: asyncpg.Connection) -> _Fingerprint:
    digest = await conn.fetchval(_SQL["spectral_fingerprint"], list(SPECTRAL_SCHEMAS))
    rows = await conn.fetch(_SQL["consumer_roles"])
    return _Fingerprint(digest, frozenset((r["consumer"], r["role"]) for r in rows))


def _check_spectral_untouched(
    plugin: str, migration: Migration, before: _Fingerprint, after: _Fingerprint
) -> None:
    problem = None
    if before.digest != after.digest:
        schemas = ", ".join(SPECTRAL_SCHEMAS)
        problem = (
            f"it changes spectral's own objects (schemas {schemas}: their tables, columns, "
            "indexes, constraints, triggers, policies, functions or privileges). A plugin keeps "
            "its objects in a schema of its own and reaches spectral's through membership in "
            "spectral's roles (GRANT spectral_consumer TO its role)"
        )
    elif not before.registrations <= after.registrations:
        changed = sorted(c for c, _ in before.registrations - after.registrations)
        problem = (
            f"it changes or removes the consumer registrations of {', '.join(changed)} in "
            "core.consumer_roles (a plugin may only add its own)"
        )
    if problem is not None:
        raise PermanentError(f"migration {plugin}/{migration.label} is refused: {problem}")


def _check_unchanged(track: str, migration: Migration, recorded: str) -> None:
    if recorded != migration.checksum:
        where = migration.label if track == SPECTRAL else f"{track}/{migration.label}"
        raise PermanentError(
            f"migration {where} changed after it was applied; migrations are "
            "append-only: revert the edit and add a new migration instead"
        )
