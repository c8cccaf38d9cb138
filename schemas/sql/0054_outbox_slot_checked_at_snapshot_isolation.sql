-- A writer at REPEATABLE READ or SERIALIZABLE no longer writes into a generation that ended.
--
-- 0049's statement trigger reads the current generation with a query. At READ COMMITTED that
-- query takes a snapshot of its own after the INSERT's ROW EXCLUSIVE lock was granted, so it
-- sees every rotation committed before, and no rotation commits until the writer ends (0011's
-- barrier). At REPEATABLE READ and SERIALIZABLE it reads the transaction's snapshot instead:
-- a transaction that read anything before a rotation committed (while it held no lock on
-- core.outbox, so the rotation did not wait for it) still saw the ended generation as current,
-- and its rows joined a slot that the maintenance then emptied as fully published — rows lost
-- before the relay read them.
--
-- At those levels the trigger now also locks the generation row it read, FOR SHARE. Locking a
-- row version that a transaction committed after the snapshot replaced fails at those levels with
-- serialization_failure (40001): the writer's transaction is refused with the error its level
-- already asks it to retry, and nothing joins the ended generation. (FOR KEY SHARE would not do:
-- a rotation changes no key column, and a key-share lock then follows the update to the newer
-- row version and succeeds.) Writers' share locks do not conflict with each other, and a
-- rotation locks core.outbox, waiting for every writer, before it updates the row; the other
-- updates of core.outbox_generations touch ended generations only. A writer may read the
-- generations, not lock them (a lock needs UPDATE), so the locked read is a SECURITY DEFINER
-- function of its own (the trigger function has no SET clause, see 0049); a role that writes
-- the outbox may execute it. A row lock writes to the tuple, so READ COMMITTED writers (and READ
-- UNCOMMITTED ones, which PostgreSQL runs as READ COMMITTED), the usual case, keep the plain read
-- (one setting read more).

CREATE FUNCTION core.outbox_current_slot_locked() RETURNS smallint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT g.slot FROM core.outbox_generations AS g WHERE g.ended_at IS NULL FOR SHARE
$fn$;
REVOKE ALL ON FUNCTION core.outbox_current_slot_locked() FROM PUBLIC;
-- Every role that may insert into core.outbox (0011, 0015: plugins' writers).
GRANT EXECUTE ON FUNCTION core.outbox_current_slot_locked()
    TO spectral_producer, spectral_executor, spectral_outbox_writer;

CREATE OR REPLACE FUNCTION core.outbox_slot_of_statement() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    current_slot smallint;
BEGIN
    -- READ UNCOMMITTED names itself so and runs as READ COMMITTED
    IF pg_catalog.current_setting('transaction_isolation')
            IN ('read committed', 'read uncommitted') THEN
        SELECT g.slot INTO current_slot
            FROM core.outbox_generations AS g WHERE g.ended_at IS NULL;
    ELSE
        current_slot := core.outbox_current_slot_locked();
    END IF;
    IF current_slot IS NULL THEN
        RAISE EXCEPTION 'core.outbox_generations has no current generation'
            USING ERRCODE = 'cannot_connect_now',
                  HINT = 'insert one (next generation number, a free slot, now()); see README';
    END IF;
    PERFORM pg_catalog.set_config('spectral.outbox_slot', current_slot::text, true);
    RETURN NULL;
END
$fn$;
