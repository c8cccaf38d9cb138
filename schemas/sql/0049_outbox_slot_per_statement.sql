-- The outbox slot new rows go to is read once per INSERT statement, no longer once per row.
--
-- core.outbox.slot's default was core.outbox_current_slot() (0011 bounded_state): a SQL function
-- that runs a query, which PostgreSQL cannot inline, evaluated for every row a writer inserts —
-- 6-9 us of the ~33 us of PostgreSQL CPU a writer's row cost in 25-row statements. Now a BEFORE
-- INSERT statement trigger reads the current generation's slot once, before the statement forms
-- any row, and keeps it in the transaction-local setting `spectral.outbox_slot`; the column's
-- default reads that setting (a built-in function and a cast, no query).
--
-- The rotation barrier of 0011 holds as it did. An INSERT takes its ROW EXCLUSIVE lock on
-- core.outbox before its snapshot, and keeps it until its transaction ends. The trigger runs
-- inside the statement, so after that lock was granted; its query (PL/pgSQL, a volatile
-- function: a snapshot of its own, taken then) sees every rotation committed before, and no
-- rotation can commit before the writer's transaction ends (its SHARE lock waits for every ROW
-- EXCLUSIVE holder). So every row of the statement goes to a generation that stays current until
-- the row commits: no row joins a generation after it ended, as before.
-- Every statement reads the slot anew: no value set before it is used — not an earlier
-- statement's (of a savepoint rolled back since, whose lock went with it), nor one a writer set
-- itself (the trigger overwrites it before the first row is formed; only a statement that calls
-- set_config among the very expressions that form its rows could still pick a slot: a deliberate
-- act, not a race). The setting is local to the transaction; the trigger function has no SET
-- clause, which would undo it when it returns.
-- An insert that fires no statement trigger of core.outbox (into a partition directly, which no
-- writer may) has no slot of its own read for it. Writers run at READ COMMITTED, as 0011 assumes.
--
-- No current generation is a fault of the installation, not of the event: the insert fails with
-- a class-57 error, as a dedup claim does (core.dedup_current_slot, 0011), where it failed on the
-- slot's NOT NULL before.

CREATE FUNCTION core.outbox_slot_of_statement() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    current_slot smallint;
BEGIN
    SELECT g.slot INTO current_slot FROM core.outbox_generations AS g WHERE g.ended_at IS NULL;
    IF current_slot IS NULL THEN
        RAISE EXCEPTION 'core.outbox_generations has no current generation'
            USING ERRCODE = 'cannot_connect_now',
                  HINT = 'insert one (next generation number, a free slot, now()); see README';
    END IF;
    PERFORM pg_catalog.set_config('spectral.outbox_slot', current_slot::text, true);
    RETURN NULL;
END
$fn$;

CREATE TRIGGER outbox_slot_of_statement BEFORE INSERT ON core.outbox
    FOR EACH STATEMENT EXECUTE FUNCTION core.outbox_slot_of_statement();

ALTER TABLE core.outbox ALTER COLUMN slot
    SET DEFAULT pg_catalog.current_setting('spectral.outbox_slot')::smallint;
