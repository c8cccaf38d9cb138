-- The migrator's own statements (spectral/db/migrate.py).

-- name: bootstrap
-- spectral's migration record, before its first migration can create anything.
CREATE SCHEMA IF NOT EXISTS core;
CREATE TABLE IF NOT EXISTS core.schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: lock
-- One advisory lock for every migrator, held to the end of the file's transaction.
SELECT pg_advisory_xact_lock($1);

-- name: spectral_checksum
SELECT checksum FROM core.schema_migrations WHERE version = $1;

-- name: record_spectral
INSERT INTO core.schema_migrations (version, name, checksum) VALUES ($1, $2, $3);

-- name: plugin_record_exists
SELECT to_regclass('core.plugin_migrations') IS NOT NULL;

-- name: plugin_checksum
SELECT checksum FROM core.plugin_migrations WHERE plugin = $1 AND version = $2;

-- name: record_plugin
INSERT INTO core.plugin_migrations (plugin, version, name, checksum) VALUES ($1, $2, $3, $4);

-- name: consumer_roles
SELECT consumer, role::text FROM core.consumer_roles;

-- name: spectral_fingerprint
-- Everything a plugin's migration may not change, as one digest: the objects of spectral's
-- schemas ($1) — relations and their columns, constraints, indexes, triggers, row-level security
-- policies, functions, privileges and default privileges — and spectral's migration record.
-- (Rows a plugin adds to spectral's tables, such as its core.consumer_roles row, are data and
-- are checked apart.)
SELECT md5(coalesce(string_agg(item, E'\n' ORDER BY item), ''))
FROM (
    SELECT format('schema %s acl=%s', n.nspname, n.nspacl) AS item
    FROM pg_namespace AS n
    WHERE n.nspname = ANY ($1::text[])
    UNION ALL
    SELECT format('relation %s.%s kind=%s rls=%s force=%s acl=%s',
                  n.nspname, c.relname, c.relkind, c.relrowsecurity, c.relforcerowsecurity,
                  c.relacl)
    FROM pg_class AS c
    JOIN pg_namespace AS n ON n.oid = c.relnamespace
    WHERE n.nspname = ANY ($1::text[])
    UNION ALL
    SELECT format('column %s.%s.%s %s type=%s notnull=%s default=%s acl=%s',
                  n.nspname, c.relname, a.attnum, a.attname, a.atttypid::regtype, a.attnotnull,
                  pg_get_expr(d.adbin, d.adrelid), a.attacl)
    FROM pg_attribute AS a
    JOIN pg_class AS c ON c.oid = a.attrelid
    JOIN pg_namespace AS n ON n.oid = c.relnamespace
    LEFT JOIN pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE n.nspname = ANY ($1::text[]) AND a.attnum > 0
    UNION ALL
    SELECT format('constraint %s.%s %s', n.nspname, o.conname, pg_get_constraintdef(o.oid))
    FROM pg_constraint AS o
    JOIN pg_namespace AS n ON n.oid = o.connamespace
    WHERE n.nspname = ANY ($1::text[])
    UNION ALL
    SELECT format('index %s', pg_get_indexdef(i.indexrelid))
    FROM pg_index AS i
    JOIN pg_class AS c ON c.oid = i.indexrelid
    JOIN pg_namespace AS n ON n.oid = c.relnamespace
    WHERE n.nspname = ANY ($1::text[])
    UNION ALL
    SELECT format('trigger %s enabled=%s', pg_get_triggerdef(t.oid), t.tgenabled)
    FROM pg_trigger AS t
    JOIN pg_class AS c ON c.oid = t.tgrelid
    JOIN pg_namespace AS n ON n.oid = c.relnamespace
    WHERE n.nspname = ANY ($1::text[]) AND NOT t.tgisinternal
    UNION ALL
    SELECT format('policy %s.%s %s %s roles=%s using=%s check=%s',
                  n.nspname, c.relname, p.polname, p.polcmd,
                  ARRAY(SELECT r::regrole::text FROM unnest(p.polroles) AS r ORDER BY 1),
                  pg_get_expr(p.polqual, p.polrelid), pg_get_expr(p.polwithcheck, p.polrelid))
    FROM pg_policy AS p
    JOIN pg_class AS c ON c.oid = p.polrelid
    JOIN pg_namespace AS n ON n.oid = c.relnamespace
    WHERE n.nspname = ANY ($1::text[])
    UNION ALL
    SELECT format('function %s definer=%s config=%s acl=%s body=%s',
                  f.oid::regprocedure, f.prosecdef, f.proconfig, f.proacl, md5(f.prosrc))
    FROM pg_proc AS f
    JOIN pg_namespace AS n ON n.oid = f.pronamespace
    WHERE n.nspname = ANY ($1::text[])
    UNION ALL
    SELECT format('default privileges %s %s %s', n.nspname, x.defaclobjtype, x.defaclacl)
    FROM pg_default_acl AS x
    JOIN pg_namespace AS n ON n.oid = x.defaclnamespace
    WHERE n.nspname = ANY ($1::text[])
    UNION ALL
    SELECT format('migration %s %s %s', m.version, m.name, m.checksum)
    FROM core.schema_migrations AS m
) AS everything;
