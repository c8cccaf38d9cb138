-- The dedup record's list of each slot's consumers is checked before it is grouped.
--
-- After every INSERT statement on core.event_handled, core.dedup_note_slot_consumers (0039
-- dedup_key_leads) adds the (slot, consumer) pairs of the statement's new rows that
-- core.dedup_slot_consumers does not show yet, grouping all the new rows by pair to find them.
-- A consumer's claim almost always inserts rows of one pair that the list already shows (every
-- claim after a generation's first). The function now checks that case first: it takes the
-- pair of any one new row and, if the list shows it (a visible row) and no new row has another
-- pair, there is nothing to add; otherwise it adds the missing pairs exactly as before. The
-- check still reads every new row (a comparison each, no grouping), so no pair can be missed:
-- what the list holds after any statement is what 0039's function left. Measured on a scratch
-- copy of the record (200,000 keys in 2,000-key statements, 6 rounds alternated, load 5.4-5.5):
-- the trigger cost 0.22 us of PostgreSQL CPU per key before, 0.07 with the check.

CREATE OR REPLACE FUNCTION core.dedup_note_slot_consumers() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    one_slot smallint;
    one_consumer text COLLATE "C";
BEGIN
    SELECT n.slot, n.consumer INTO one_slot, one_consumer FROM new_rows AS n LIMIT 1;
    IF one_slot IS NULL THEN
        RETURN NULL;  -- no row
    END IF;
    IF EXISTS (
        SELECT FROM core.dedup_slot_consumers AS known
        WHERE known.slot = one_slot AND known.consumer = one_consumer
    ) AND NOT EXISTS (
        SELECT FROM new_rows AS n WHERE n.slot <> one_slot OR n.consumer <> one_consumer
    ) THEN
        RETURN NULL;  -- one pair, already listed
    END IF;
    INSERT INTO core.dedup_slot_consumers (slot, consumer)
    SELECT pair.slot, pair.consumer
    FROM (SELECT DISTINCT n.slot, n.consumer FROM new_rows AS n) AS pair
    WHERE NOT EXISTS (
        SELECT FROM core.dedup_slot_consumers AS known
        WHERE known.slot = pair.slot AND known.consumer = pair.consumer
    );
    RETURN NULL;
END
$fn$;
