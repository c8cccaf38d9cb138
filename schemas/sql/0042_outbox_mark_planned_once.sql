-- The relay's mark keeps one plan per session, made of primary-key probes only.
--
-- core.outbox_mark_published (0011 bounded_state) was a LANGUAGE sql function: it is not inlined
-- (it updates), so every call parsed, analysed and planned its UPDATE over the four slots. At
-- the relay's small batches (~20 rows at 2,000 events/s) that fixed work was most of the mark:
-- ~0.75 ms of database CPU for 20 rows. As PL/pgSQL the statement is parsed once per session
-- and its plan is kept (plan_cache_mode = force_generic_plan: one plan, whatever the batch's
-- size). That plan cannot scan a slot: it is made with sequential and bitmap scans disabled, and
-- the row's filter is written num_nulls(published_at) = 1 — the same test as published_at IS
-- NULL, which the planner cannot match with the predicate of the partial indexes of unpublished
-- rows — so the only way to a row is its slot's primary key (id, slot), probed once per row,
-- whatever the planner knew of the slot's size when it planned (a slot grows from empty after
-- every rotation). Written IS NULL, a plan made on an empty slot reached each row through the
-- partial index on (record_key, id) with only id to go by: every entry of the slot's backlog
-- read for every row marked (~1,000 entries per row with 20,000 rows waiting; test_mark_plan).
-- A TRUNCATE of a slot or new statistics make the session plan it again, the same way.
-- jit = off: a disabled path is costed at 10^10, which would make the statement compile itself
-- with LLVM.
-- The settings hold for the function's call only. What the function does is unchanged: it sets
-- published_at = now() on the unpublished rows named by (id, slot) and returns how many; the
-- relay role may still do nothing else to the outbox. Measured (PostgreSQL CPU per row, 10,000
-- rows marked by the relay's session, load 10-15): 20-row marks 38 -> 24-27 us, 500-row marks
-- 8-9 -> 4-6 us.

CREATE OR REPLACE FUNCTION core.outbox_mark_published(ids bigint[], slots smallint[]) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $fn$
DECLARE
    marked bigint;
BEGIN
    UPDATE core.outbox AS o
    SET published_at = now()
    FROM unnest(ids, slots) AS t (id, slot)
    WHERE o.id = t.id AND o.slot = t.slot AND num_nulls(o.published_at) = 1;
    GET DIAGNOSTICS marked = ROW_COUNT;
    RETURN marked;
END
$fn$;
