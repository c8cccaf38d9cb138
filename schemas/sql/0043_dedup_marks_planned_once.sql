-- The engine's stale marks and forgetting keep one plan per session, made of index probes only.
--
-- The engine marks the keys a handler found stale (spectral/engine/queries.sql mark_stale) and
-- forgets the keys it rejected (forget) by one statement each over the batch's keys, through
-- core.dedup_rows_of (0011, 0028: one probe of the primary key per key and slot, the row then
-- reached by its address). Sent as prepared statements they were planned at every call (the
-- plan cache kept choosing custom plans): ~0.44 ms of database CPU for a mark of 5 keys, most
-- of it planning an UPDATE of a partitioned table under row-level security. As PL/pgSQL
-- functions, core.dedup_mark_stale and core.dedup_forget keep one plan per session, made as
-- core.dedup_claim's is (0041 claim_planned_once): generic, with sequential and bitmap scans
-- disabled so that a plan made while a slot was small can never scan it once it is large (the
-- keys are probed through the primary key, the rows reached by their address), jit off. What
-- they change is unchanged: the rows of these keys of that consumer, in either slot; row-level
-- security applies (they run with the caller's privileges). Measured (PostgreSQL CPU per
-- statement, interleaved, load 6-7): 5 keys 440 -> 206 us, 500 keys 4.13 -> 4.08 ms.

CREATE FUNCTION core.dedup_mark_stale(of_consumer text, keys bytea[]) RETURNS void
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $fn$
BEGIN
    UPDATE core.event_handled AS h SET outcome = 'stale'
    FROM core.dedup_rows_of(of_consumer, keys) AS target
    WHERE h.tableoid = target.tableoid AND h.ctid = target.ctid;
END
$fn$;

CREATE FUNCTION core.dedup_forget(of_consumer text, keys bytea[]) RETURNS void
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $fn$
BEGIN
    DELETE FROM core.event_handled AS h
    USING core.dedup_rows_of(of_consumer, keys) AS target
    WHERE h.tableoid = target.tableoid AND h.ctid = target.ctid;
END
$fn$;

GRANT EXECUTE ON FUNCTION core.dedup_mark_stale(text, bytea[]), core.dedup_forget(text, bytea[])
    TO spectral_projector, spectral_executor, spectral_consumer;
