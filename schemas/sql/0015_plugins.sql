-- plugins: what another team's package (a plugin: README, "Extending spectral") needs of spectral's
-- database, granted through two group roles so a plugin never edits spectral's own grants.
--
-- core.plugin_migrations records each plugin's migrations: numbered on the plugin's own track,
-- checksummed, applied after spectral's by `spectral db migrate` (spectral/db/migrate.py), apart
-- from spectral's record (core.schema_migrations), which a plugin can neither edit nor shadow.
--
-- spectral_consumer: what the consumer engine does as a deployment's role — record and forget
-- its dedup keys (row-level security keeps a role to the consumers core.consumer_roles gives it),
-- read the dedup generations (the replay guard), and write core.dead_letters (the last resort
-- of a dead letter the broker refuses). A plugin's projection role is a member of it, and the
-- plugin registers its consumer name: INSERT INTO core.consumer_roles VALUES (name, role).
--
-- spectral_outbox_writer: what spectral.outbox.enqueue needs (insert rows, read back their ids),
-- for a plugin's producer or a projection that emits events.

CREATE TABLE core.plugin_migrations (
    plugin     text        NOT NULL,
    version    integer     NOT NULL CHECK (version >= 1),
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (plugin, version)
);

DO $roles$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['spectral_consumer', 'spectral_outbox_writer']
    LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
END
$roles$;

GRANT USAGE ON SCHEMA core TO spectral_consumer, spectral_outbox_writer;

GRANT SELECT ON core.consumer_roles, core.dedup_generations TO spectral_consumer;
GRANT SELECT, INSERT, DELETE ON core.event_handled TO spectral_consumer;
GRANT UPDATE (outcome) ON core.event_handled TO spectral_consumer;
GRANT INSERT ON core.dead_letters TO spectral_consumer;
ALTER POLICY event_handled_own_consumers ON core.event_handled
    TO spectral_projector, spectral_executor, spectral_consumer;

GRANT INSERT (event_type, record_key, idempotency_key, envelope, available_at)
    ON core.outbox TO spectral_outbox_writer;
GRANT SELECT (id) ON core.outbox TO spectral_outbox_writer;
GRANT SELECT ON core.outbox_generations TO spectral_outbox_writer;
