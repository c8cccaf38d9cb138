"""A plugin's migrations run on their own track, after spectral's, and can never edit or shadow
spectral's (spectral/db/migrate.py)."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from spectral.db.migrate import SPECTRAL_SCHEMAS, discover, migrate
from spectral.errors import ConfigurationError, PermanentError
from spectral.plugins import MigrationTrack

pytestmark = pytest.mark.integration

NOTES_0001 = """
CREATE SCHEMA notes;
CREATE TABLE notes.notes (note_id text PRIMARY KEY, body text NOT NULL);
DO $r$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'notes_projector') THEN
        CREATE ROLE notes_projector NOLOGIN;
    END IF;
END $r$;
GRANT spectral_consumer TO notes_projector;
GRANT USAGE ON SCHEMA notes TO notes_projector;
GRANT SELECT, INSERT, UPDATE ON notes.notes TO notes_projector;
INSERT INTO core.consumer_roles (consumer, role) VALUES ('notes', 'notes_projector');
"""


def _track(tmp_path: Path, files: dict[str, str], plugin: str = "notes") -> MigrationTrack:
    folder = tmp_path / plugin
    folder.mkdir(exist_ok=True)
    for name, sql in files.items():
        (folder / name).write_text(sql)
    return MigrationTrack(plugin, folder)


async def _fetchval(url: str, sql: str) -> object:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval(sql)
    finally:
        await conn.close()


async def test_a_plugin_track_is_numbered_and_recorded_apart_from_spectrals(
    database_url: str, tmp_path: Path
) -> None:
    track = _track(tmp_path, {"0001_notes.sql": NOTES_0001})
    first = await migrate(database_url, plugins=[track])
    assert first.applied == ()  # spectral's track: all there (the template is migrated)
    assert len(first.already) == len(discover())
    [notes] = first.plugins
    assert (notes.plugin, notes.applied, notes.already) == ("notes", ("0001_notes",), ())
    assert await _fetchval(database_url, "SELECT count(*) FROM core.schema_migrations") == len(
        discover()
    )
    assert (
        await _fetchval(
            database_url, "SELECT name FROM core.plugin_migrations WHERE plugin = 'notes'"
        )
        == "notes"
    )

    (tmp_path / "notes" / "0002_more.sql").write_text("ALTER TABLE notes.notes ADD x int;")
    second = await migrate(database_url, plugins=[track])
    assert second.plugins[0].applied == ("0002_more",)
    assert second.plugins[0].already == ("0001_notes",)
    again = await migrate(database_url, plugins=[track])
    assert again.plugins[0].applied == ()


async def test_an_edited_plugin_migration_is_refused(database_url: str, tmp_path: Path) -> None:
    track = _track(tmp_path, {"0001_notes.sql": NOTES_0001})
    await migrate(database_url, plugins=[track])
    (tmp_path / "notes" / "0001_notes.sql").write_text(NOTES_0001 + "\n-- edited\n")
    with pytest.raises(PermanentError, match="notes/0001_notes changed after it was applied"):
        await migrate(database_url, plugins=[track])


async def test_a_gap_in_a_plugin_track_is_refused_naming_it(tmp_path: Path) -> None:
    track = _track(tmp_path, {"0001_a.sql": "SELECT 1;", "0003_c.sql": "SELECT 1;"})
    with pytest.raises(PermanentError, match=r"notes: migration numbers must run 1..N"):
        discover(track.directory, track.plugin)
    empty = _track(tmp_path, {}, plugin="empty")
    with pytest.raises(ConfigurationError, match="no migrations found for empty"):
        discover(empty.directory, empty.plugin)


@pytest.mark.parametrize(
    ("sql", "problem"),
    [
        ("ALTER TABLE core.outbox ADD COLUMN notes text;", "spectral's own objects"),
        ("CREATE TABLE platform.notes (id int);", "spectral's own objects"),
        ("CREATE INDEX ON core.event_handled (handled_at);", "spectral's own objects"),
        ("GRANT SELECT ON core.api_tokens TO spectral_consumer;", "spectral's own objects"),
        (
            "ALTER POLICY event_handled_own_consumers ON core.event_handled TO PUBLIC;",
            "spectral's own objects",
        ),
        (
            (
                "CREATE OR REPLACE FUNCTION core.consumers_of_current_role() RETURNS text[] "
                "LANGUAGE sql STABLE AS $$ SELECT ARRAY['rule-candidates'] $$;"
            ),
            "spectral's own objects",
        ),
        ("DELETE FROM core.schema_migrations WHERE version = 1;", "spectral's own objects"),
        (
            (
                "UPDATE core.consumer_roles SET role = 'spectral_consumer' "
                "WHERE consumer = 'rule-candidates';"
            ),
            "consumer registrations of rule-candidates",
        ),
    ],
)
async def test_a_plugin_migration_that_touches_spectrals_objects_is_rolled_back(
    database_url: str, tmp_path: Path, sql: str, problem: str
) -> None:
    track = _track(tmp_path, {"0001_notes.sql": NOTES_0001, "0002_bad.sql": sql})
    with pytest.raises(PermanentError, match=f"notes/0002_bad is refused: it changes.*{problem}"):
        await migrate(database_url, plugins=[track])
    # Its first file stays applied, the refused one left no trace and is not recorded.
    assert await _fetchval(
        database_url, "SELECT array_agg(version) FROM core.plugin_migrations"
    ) == [1]
    assert (
        await _fetchval(
            database_url,
            "SELECT count(*) FROM information_schema.columns "
            "WHERE table_schema = 'core' AND table_name = 'outbox' AND column_name = 'notes'",
        )
        == 0
    )
    assert (
        await _fetchval(
            database_url, "SELECT role FROM core.consumer_roles WHERE consumer = 'rule-candidates'"
        )
        == "spectral_projector"
    )


async def test_spectral_schemas_are_exactly_what_spectrals_track_creates(
    database_url: str,
) -> None:
    schemas = await _fetchval(
        database_url,
        "SELECT array_agg(nspname::text ORDER BY nspname) FROM pg_namespace "
        "WHERE nspname NOT LIKE 'pg\\_%' AND nspname NOT IN ('information_schema', 'public') "
        "AND nspowner <> 'pg_database_owner'::regrole",
    )
    created_by_plugins = await _fetchval(
        database_url, "SELECT count(DISTINCT plugin) FROM core.plugin_migrations"
    )
    assert isinstance(schemas, list)
    if created_by_plugins == 0:
        assert schemas == list(SPECTRAL_SCHEMAS)
    else:  # installed plugins add schemas of their own; spectral's are all there
        assert set(SPECTRAL_SCHEMAS) <= set(schemas)
