-- Bounded state: core.event_handled and core.outbox become rings of partitions that
-- `spectral maintenance` empties whole (TRUNCATE) behind a horizon argued in the README
-- ("Bounded state"); the roles that write them are narrowed to what each needs.
--
-- Both tables hold data in existing deployments. They are converted in place: the existing table
-- becomes slot 0 of the new partitioned table (ATTACH, no copy of the rows; one unique index is
-- built over the existing dedup rows and one over the outbox rows), generation 1 of each ring.
--
-- DEDUP RING (two slots). PostgreSQL enforces uniqueness on a partitioned table only over keys
-- that include the partition key, and nothing every duplicate of an event shares is time-ordered,
-- so time partitions cannot keep (consumer, idempotency_key) unique. Instead: the current
-- generation's rows go to one slot, the previous generation lives in the other, and a claim
-- inserts into the current slot (ON CONFLICT on that slot's unique key) only if the previous slot
-- does not hold the key: both slots are checked, every time. A rotation (maintenance) empties the
-- previous slot with TRUNCATE and makes it the current one.
-- The barrier that keeps the two checks race-free: a rotation takes ACCESS EXCLUSIVE on
-- core.event_handled, so it waits for every transaction that claimed keys to commit (they hold a
-- lock on the table until then), and a claim that comes after it reads the new current slot from
-- core.dedup_generations in the same statement, with a snapshot taken after its lock was granted:
-- it sees the generation row and every key the earlier claims committed.
--
-- OUTBOX RING (four slots). New rows go to the current generation's slot; a rotation takes a
-- SHARE lock on core.outbox (waiting for every transaction that inserted rows), so no row joins a
-- generation after it ended. An ended generation whose rows were all published, and stayed so for
-- the outbox retention, is emptied with TRUNCATE, under an exclusive lock that re-checks "no
-- unpublished row" first: an unpublished row is never pruned. Delayed rows (available_at well in
-- the future, which no relay can have in flight) are moved with their id to the current slot so an
-- old slot can be emptied; ids come from one identity sequence, so the relay's per-key id order
-- holds across slots.

-- Roles: the relay gets its own (it used to share spectral_producer with the writers), and
-- maintenance acts as spectral_maintainer.
DO $roles$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['spectral_relay', 'spectral_maintainer']
    LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
END
$roles$;
GRANT USAGE ON SCHEMA core TO spectral_relay, spectral_maintainer;

-- ==== the dedup record ==========================================================================

-- One row per generation. The current one has ended_at NULL; at most one generation lives in a
-- slot (forgotten_at NULL). copies_before: when the generation was forgotten, every record that
-- carried one of its keys had been appended before this time (the replay guard refuses ranges
-- that reach further back).
CREATE TABLE core.dedup_generations (
    generation     bigint      PRIMARY KEY,
    slot           smallint    NOT NULL CHECK (slot IN (0, 1)),
    started_at     timestamptz NOT NULL,
    ended_at       timestamptz NULL,
    forgotten_at   timestamptz NULL,
    copies_before  timestamptz NULL,
    rows_forgotten bigint      NULL,
    CHECK (forgotten_at IS NULL OR ended_at IS NOT NULL),
    CHECK ((forgotten_at IS NULL) = (copies_before IS NULL))
);
CREATE UNIQUE INDEX dedup_generations_one_current ON core.dedup_generations ((true))
    WHERE ended_at IS NULL;
CREATE UNIQUE INDEX dedup_generations_one_per_slot ON core.dedup_generations (slot)
    WHERE forgotten_at IS NULL;
-- Generation 1 holds every key handled so far, since the beginning.
INSERT INTO core.dedup_generations (generation, slot, started_at) VALUES (1, 0, '-infinity');

-- The slot claims go to. A dedup record without a current generation is a fault of the
-- installation, not of an event: it raises a class-57 error, which the consumer engine treats as
-- an infrastructure fault (it pauses and retries) instead of deduplicating or dead-lettering.
CREATE FUNCTION core.dedup_current_slot() RETURNS smallint
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    current_slot smallint;
BEGIN
    SELECT slot INTO current_slot FROM core.dedup_generations WHERE ended_at IS NULL;
    IF current_slot IS NULL THEN
        RAISE EXCEPTION 'core.dedup_generations has no current generation'
            USING ERRCODE = 'cannot_connect_now',
                  HINT = 'insert one (next generation number, the free slot, now()); see README';
    END IF;
    RETURN current_slot;
END
$fn$;

ALTER TABLE core.event_handled RENAME TO event_handled_0;
ALTER TABLE core.event_handled_0 ADD COLUMN slot smallint NOT NULL DEFAULT 0;
ALTER TABLE core.event_handled_0 ALTER COLUMN slot DROP DEFAULT;
ALTER TABLE core.event_handled_0 ADD CONSTRAINT event_handled_0_slot CHECK (slot = 0);
CREATE UNIQUE INDEX event_handled_0_pkey
    ON core.event_handled_0 (consumer, idempotency_key, slot);
ALTER TABLE core.event_handled_0 DROP CONSTRAINT event_handled_pkey;
ALTER TABLE core.event_handled_0
    ADD CONSTRAINT event_handled_0_pkey PRIMARY KEY USING INDEX event_handled_0_pkey;
-- The partition is reached through the parent only (row-level security lives there).
REVOKE ALL ON core.event_handled_0 FROM PUBLIC, spectral_projector, spectral_executor;

CREATE TABLE core.event_handled (
    consumer         text        NOT NULL,
    idempotency_key  text        NOT NULL,
    event_id         uuid        NOT NULL,
    outcome          text        NOT NULL
                     CONSTRAINT event_handled_outcome_check CHECK (outcome IN ('applied', 'stale')),
    source_partition integer     NOT NULL,
    source_offset    bigint      NOT NULL,
    handled_at       timestamptz NOT NULL DEFAULT now(),
    slot             smallint    NOT NULL,
    PRIMARY KEY (consumer, idempotency_key, slot)
) PARTITION BY LIST (slot);
ALTER TABLE core.event_handled ATTACH PARTITION core.event_handled_0 FOR VALUES IN (0);
CREATE TABLE core.event_handled_1 PARTITION OF core.event_handled FOR VALUES IN (1);
REVOKE ALL ON core.event_handled_1 FROM PUBLIC;

-- Which consumer names each role may record. Row-level security keeps a role to its consumers'
-- rows; a deployment of another team registers its consumer here (one row, by an administrator).
CREATE TABLE core.consumer_roles (
    consumer text PRIMARY KEY,
    role     name NOT NULL
);
INSERT INTO core.consumer_roles (consumer, role) VALUES
    ('rule-candidates', 'spectral_projector'),
    ('work-executor', 'spectral_executor');

-- The consumer names the current role may act for (evaluated once per statement: the policies
-- wrap it in a scalar sub-select, which PostgreSQL runs as an InitPlan).
CREATE FUNCTION core.consumers_of_current_role() RETURNS text[]
LANGUAGE sql STABLE AS $fn$
    SELECT coalesce(array_agg(c.consumer), '{}')
    FROM core.consumer_roles AS c
    JOIN pg_roles AS r ON r.rolname = c.role
    WHERE pg_has_role(current_user, r.oid, 'MEMBER')
$fn$;

-- The rows of these keys of one consumer, by address (table and tuple id): one probe of the
-- primary key per key (LATERAL ... LIMIT 1), whatever the planner knows of the table. The
-- engine's mark_stale and forget update and delete through it. (Inlined by the planner; runs
-- with the caller's privileges, so row-level security applies.)
CREATE FUNCTION core.dedup_rows_of(of_consumer text, keys text[])
RETURNS TABLE (tableoid oid, ctid tid)
LANGUAGE sql STABLE AS $fn$
    SELECT found.tableoid, found.ctid
    FROM unnest(keys) AS k (key)
    CROSS JOIN LATERAL (
        SELECT e.tableoid, e.ctid
        FROM core.event_handled AS e
        WHERE e.consumer = of_consumer AND e.idempotency_key = k.key
        LIMIT 1
    ) AS found
$fn$;

ALTER TABLE core.event_handled ENABLE ROW LEVEL SECURITY;
CREATE POLICY event_handled_own_consumers ON core.event_handled
    TO spectral_projector, spectral_executor
    USING (consumer = ANY ((SELECT core.consumers_of_current_role())::text[]))
    WITH CHECK (consumer = ANY ((SELECT core.consumers_of_current_role())::text[]));
CREATE POLICY event_handled_maintainer_reads ON core.event_handled
    FOR SELECT TO spectral_maintainer USING (true);

GRANT SELECT ON core.consumer_roles, core.dedup_generations
    TO spectral_projector, spectral_executor, spectral_maintainer;
GRANT SELECT, INSERT, DELETE ON core.event_handled TO spectral_projector, spectral_executor;
GRANT UPDATE (outcome) ON core.event_handled TO spectral_projector, spectral_executor;
GRANT SELECT ON core.event_handled TO spectral_maintainer;
GRANT INSERT, UPDATE ON core.dedup_generations TO spectral_maintainer;
GRANT TRUNCATE ON core.event_handled_0, core.event_handled_1 TO spectral_maintainer;
-- A dead letter redriven recently holds the dedup record back while its copy may be read.
GRANT SELECT ON core.dlq_redrives TO spectral_maintainer;

-- The rotation's barrier, for the maintainer, which may not write the table: the lock is taken
-- inside the caller's transaction and held until it ends.
CREATE FUNCTION core.lock_dedup_for_rotation() RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    LOCK TABLE core.event_handled IN ACCESS EXCLUSIVE MODE
$fn$;
REVOKE ALL ON FUNCTION core.lock_dedup_for_rotation() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.lock_dedup_for_rotation() TO spectral_maintainer;

-- ==== the outbox ================================================================================

CREATE TABLE core.outbox_generations (
    generation         bigint      PRIMARY KEY,
    slot               smallint    NOT NULL CHECK (slot BETWEEN 0 AND 3),
    started_at         timestamptz NOT NULL,
    ended_at           timestamptz NULL,
    -- first time maintenance found the ended generation without an unpublished row: every row of
    -- it had been published by then (no row can join an ended generation: see the barrier above)
    fully_published_at timestamptz NULL,
    truncated_at       timestamptz NULL,
    rows_pruned        bigint      NULL,
    CHECK (fully_published_at IS NULL OR ended_at IS NOT NULL),
    CHECK (truncated_at IS NULL OR fully_published_at IS NOT NULL)
);
CREATE UNIQUE INDEX outbox_generations_one_current ON core.outbox_generations ((true))
    WHERE ended_at IS NULL;
CREATE UNIQUE INDEX outbox_generations_one_per_slot ON core.outbox_generations (slot)
    WHERE truncated_at IS NULL;
INSERT INTO core.outbox_generations (generation, slot, started_at) VALUES (1, 0, '-infinity');

-- The slot new rows go to (spectral/outbox.sql reads it once per statement; this default serves
-- writers that do not name a slot, and the column privileges let no writer name one).
CREATE FUNCTION core.outbox_current_slot() RETURNS smallint
LANGUAGE sql STABLE AS $fn$
    SELECT slot FROM core.outbox_generations WHERE ended_at IS NULL
$fn$;

-- Keep the identity sequence's position: ids never go back.
CREATE TEMP TABLE outbox_last_id ON COMMIT DROP AS
SELECT greatest(
    (SELECT last_value FROM core.outbox_id_seq),
    (SELECT coalesce(max(id), 0) FROM core.outbox)
) AS last_id;

ALTER TABLE core.outbox RENAME TO outbox_0;
ALTER TABLE core.outbox_0 ALTER COLUMN id DROP IDENTITY;
ALTER TABLE core.outbox_0 ADD COLUMN slot smallint NOT NULL DEFAULT 0;
ALTER TABLE core.outbox_0 ALTER COLUMN slot DROP DEFAULT;
ALTER TABLE core.outbox_0 ADD CONSTRAINT outbox_0_slot CHECK (slot = 0);
CREATE UNIQUE INDEX outbox_0_pkey ON core.outbox_0 (id, slot);
ALTER TABLE core.outbox_0 DROP CONSTRAINT outbox_pkey;
ALTER TABLE core.outbox_0 ADD CONSTRAINT outbox_0_pkey PRIMARY KEY USING INDEX outbox_0_pkey;
ALTER INDEX core.outbox_unpublished RENAME TO outbox_0_unpublished;
ALTER INDEX core.outbox_unpublished_by_key RENAME TO outbox_0_unpublished_by_key;
ALTER INDEX core.outbox_unpublished_available RENAME TO outbox_0_unpublished_available;
REVOKE ALL ON core.outbox_0 FROM PUBLIC, spectral_producer, spectral_executor;

CREATE TABLE core.outbox (
    id              bigint      GENERATED ALWAYS AS IDENTITY,
    event_type      text        NOT NULL,
    record_key      text        NOT NULL,
    idempotency_key text        NOT NULL,
    envelope        bytea       NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    available_at    timestamptz NOT NULL DEFAULT now(),
    published_at    timestamptz NULL,
    slot            smallint    NOT NULL DEFAULT core.outbox_current_slot(),
    PRIMARY KEY (id, slot)
) PARTITION BY LIST (slot);
-- The same partial indexes as before (0001, 0003, 0005); ATTACH adopts the partition's own.
CREATE INDEX outbox_unpublished ON core.outbox (id) WHERE published_at IS NULL;
CREATE INDEX outbox_unpublished_by_key ON core.outbox (record_key, id) WHERE published_at IS NULL;
CREATE INDEX outbox_unpublished_available ON core.outbox (available_at)
    WHERE published_at IS NULL;
ALTER TABLE core.outbox ATTACH PARTITION core.outbox_0 FOR VALUES IN (0);
CREATE TABLE core.outbox_1 PARTITION OF core.outbox FOR VALUES IN (1);
CREATE TABLE core.outbox_2 PARTITION OF core.outbox FOR VALUES IN (2);
CREATE TABLE core.outbox_3 PARTITION OF core.outbox FOR VALUES IN (3);
REVOKE ALL ON core.outbox_1, core.outbox_2, core.outbox_3 FROM PUBLIC;
SELECT setval(pg_get_serial_sequence('core.outbox', 'id'), last_id + 1, false)
FROM outbox_last_id;

-- The unpublished rows of one slot that no relay can publish within the margin: delayed beyond
-- it, or queued behind an earlier row of their key that is (a relay publishes a key's rows in id
-- order). Maintenance counts them and moves them out of an ended slot.
CREATE FUNCTION core.outbox_held_back(of_slot smallint, margin interval)
RETURNS TABLE (id bigint)
LANGUAGE sql STABLE AS $fn$
    SELECT o.id
    FROM core.outbox AS o
    WHERE o.slot = of_slot
      AND o.published_at IS NULL
      AND (
          o.available_at > now() + margin
          OR EXISTS (
              SELECT 1
              FROM core.outbox AS earlier
              WHERE earlier.record_key = o.record_key
                AND earlier.published_at IS NULL
                AND earlier.id < o.id
                AND earlier.available_at > now() + margin
          )
      )
$fn$;

-- The relay marks rows published through this function only: it sets published_at to now() on
-- unpublished rows and can do nothing else (no row becomes unpublished again, no other column
-- changes). Returns how many rows it marked.
CREATE FUNCTION core.outbox_mark_published(ids bigint[], slots smallint[]) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    WITH marked AS (
        UPDATE core.outbox AS o
        SET published_at = now()
        FROM unnest(ids, slots) AS t (id, slot)
        WHERE o.id = t.id AND o.slot = t.slot AND o.published_at IS NULL
        RETURNING 1
    )
    SELECT count(*) FROM marked
$fn$;
REVOKE ALL ON FUNCTION core.outbox_mark_published(bigint[], smallint[]) FROM PUBLIC;

-- Writers (producers, commands, the executor's retries) insert new rows and read back their ids;
-- they can neither choose a slot, nor set published_at, nor change or read a row afterwards.
GRANT INSERT (event_type, record_key, idempotency_key, envelope, available_at)
    ON core.outbox TO spectral_producer, spectral_executor;
GRANT SELECT (id) ON core.outbox TO spectral_producer, spectral_executor;
GRANT SELECT ON core.outbox_generations
    TO spectral_producer, spectral_executor, spectral_relay, spectral_maintainer;
-- The relay reads rows and marks them through the function.
GRANT SELECT ON core.outbox TO spectral_relay;
GRANT EXECUTE ON FUNCTION core.outbox_mark_published(bigint[], smallint[]) TO spectral_relay;
-- Maintenance reads, moves delayed rows between slots, empties slots.
GRANT SELECT, UPDATE (slot) ON core.outbox TO spectral_maintainer;
GRANT INSERT, UPDATE ON core.outbox_generations TO spectral_maintainer;
GRANT TRUNCATE ON core.outbox_0, core.outbox_1, core.outbox_2, core.outbox_3
    TO spectral_maintainer;

-- The outbox rotation's barrier (SHARE: waits for every transaction that inserted rows, lets the
-- relays read on), for the maintainer, which may not write the table's other columns.
CREATE FUNCTION core.lock_outbox_for_rotation() RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    LOCK TABLE core.outbox IN SHARE MODE
$fn$;
REVOKE ALL ON FUNCTION core.lock_outbox_for_rotation() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.lock_outbox_for_rotation() TO spectral_maintainer;
