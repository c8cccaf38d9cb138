-- A relay's mark finds a row that maintenance moved to another slot while the relay had it in
-- flight.
--
-- Maintenance moves out of an ended slot only the rows no relay can publish within the margin
-- (core.outbox_held_back): a delayed row whose time has not come. A relay fetches a delayed row
-- only once its time has come, so it cannot have such a row in flight — while the database's
-- clock only goes forward. Stepped back by more than the margin after a relay fetched a delayed
-- row whose time had just come (an NTP correction), the clock puts that row's time in the future
-- again; maintenance moves it, with the rows of its key behind it, to the current slot, and the
-- relay's mark, which names each row by (id, slot), found nothing there: the rows stayed
-- unpublished and went out a second time once the clock caught up (a duplicate, which consumers
-- deduplicate, but a duplicate).
--
-- The mark now looks for the rows it did not find in the slot it was given in the other slots,
-- by id (ids come from one identity sequence: one row per id in the whole table). That second
-- statement runs only when the first one marked fewer rows than it was given (a row moved, or
-- one already marked), so the usual mark costs what it did (0042: one plan per session, each row
-- found by its primary key). A row already published is left as it is.

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
    moved bigint;
BEGIN
    UPDATE core.outbox AS o
    SET published_at = now()
    FROM unnest(ids, slots) AS t (id, slot)
    WHERE o.id = t.id AND o.slot = t.slot AND num_nulls(o.published_at) = 1;
    GET DIAGNOSTICS marked = ROW_COUNT;
    IF marked < cardinality(ids) THEN
        UPDATE core.outbox AS o
        SET published_at = now()
        FROM unnest(ids, slots) AS t (id, slot)
        WHERE o.id = t.id AND o.slot <> t.slot AND num_nulls(o.published_at) = 1;
        GET DIAGNOSTICS moved = ROW_COUNT;
        marked := marked + moved;
    END IF;
    RETURN marked;
END
$fn$;
