-- The dedup record's primary key leads with the key: (dedup_key, consumer, slot).
--
-- Every claim descends the primary key of core.event_handled for each key of a batch: one probe
-- per slot (core.dedup_claim, 0037) and the insert's own uniqueness check. With consumer leading
-- (consumer, dedup_key, slot), every step down the index compared the consumer's name (text)
-- first, equal on nearly every entry, before the key that tells entries apart. Leading with the
-- key (bytea, compared with memcmp, distinct almost everywhere) settles each comparison on the
-- first column. Measured on a scratch table of 100,000 keys (load 6-10): insert 9.1/9.1/7.5 ->
-- 7.5/6.7/6.5 us per key, probe 6.8/3.3/2.9 -> 2.8/2.0/2.2 us. What is unique is unchanged (the
-- same three columns), so no two rows that were distinct become one, nor the reverse; every
-- lookup by (consumer, key) stays one probe (both are equalities): the claim's probes,
-- core.dedup_rows_of (stale marks, forgetting), and the row-level security policies, which
-- compare consumer with an array of names on rows already found by the key. A statement that
-- selects by consumer alone (a rebuild forgetting all of one consumer's keys,
-- spectral/replay/rebuild.sql) reads both slots instead of a range of the index: it removes
-- most of what it reads anyway while one consumer dominates the record, and it is rare.
--
-- What the old order also served: maintenance lists the distinct consumers of a slot before a
-- rotation (an unknown consumer holds it back) by skipping through the primary key by consumer,
-- one probe per consumer. With the key leading that would read the whole slot. The consumers of
-- each slot are kept instead in core.dedup_slot_consumers, rows of (slot, consumer), by
-- triggers on the table itself, so that no way of writing or emptying the record can miss it:
--   * after each INSERT statement on core.event_handled (the engine's claim, or any other writer
--     with the privilege), its new rows' distinct (slot, consumer) pairs that the list does not
--     show yet are added, in the same transaction (committed or rolled back with the rows). The
--     list has no unique key on purpose: a claim must never wait for another transaction's
--     uncommitted pair (ON CONFLICT would), so transactions that overlap the first one of a pair
--     may each add it once more, until it is committed; readers take DISTINCT;
--   * after a TRUNCATE of a slot's partition (a rotation forgetting a generation, or a TRUNCATE
--     of the whole table), that slot's rows are deleted, in the same transaction.
-- Rows deleted one by one (a rebuild forgetting a consumer, a handler's rejected deliveries) do
-- not remove the pair: the list may name a consumer that no longer has a row in the slot, never
-- omit one that has (a rotation is held back at worst, never let through wrongly).
--
-- Cost on upgrade: under an ACCESS EXCLUSIVE lock on core.event_handled (consumers wait), one
-- read of both slots to fill the list, then the primary key of each slot's partition is dropped
-- and built again (one sort of all its rows, in proportion to the rows the ring holds: 2.7 s in
-- all for 2 million compact keys on this project's 2-core machine at load 5, 0.3 s of it the
-- read). The rows themselves are not rewritten.

LOCK TABLE core.event_handled IN ACCESS EXCLUSIVE MODE;

-- Not unique: a transaction never waits on another's pair (see above); readers take DISTINCT.
CREATE TABLE core.dedup_slot_consumers (
    slot     smallint NOT NULL,
    consumer text COLLATE "C" NOT NULL
);
CREATE INDEX dedup_slot_consumers_slot ON core.dedup_slot_consumers (slot, consumer);
REVOKE ALL ON core.dedup_slot_consumers FROM PUBLIC;
GRANT SELECT ON core.dedup_slot_consumers TO spectral_maintainer;

INSERT INTO core.dedup_slot_consumers (slot, consumer)
SELECT DISTINCT slot, consumer FROM core.event_handled;

-- Owned by the migration's role and run with its privileges: the roles that write the record
-- need no privilege on the list.
CREATE FUNCTION core.dedup_note_slot_consumers() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
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
REVOKE ALL ON FUNCTION core.dedup_note_slot_consumers() FROM PUBLIC;

CREATE TRIGGER event_handled_slot_consumers
    AFTER INSERT ON core.event_handled
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION core.dedup_note_slot_consumers();

-- TG_ARGV[0]: the slot the truncated partition holds.
CREATE FUNCTION core.dedup_forget_slot_consumers() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    DELETE FROM core.dedup_slot_consumers WHERE slot = TG_ARGV[0]::smallint;
    RETURN NULL;
END
$fn$;
REVOKE ALL ON FUNCTION core.dedup_forget_slot_consumers() FROM PUBLIC;

CREATE TRIGGER event_handled_0_slot_consumers
    AFTER TRUNCATE ON core.event_handled_0
    FOR EACH STATEMENT EXECUTE FUNCTION core.dedup_forget_slot_consumers('0');
CREATE TRIGGER event_handled_1_slot_consumers
    AFTER TRUNCATE ON core.event_handled_1
    FOR EACH STATEMENT EXECUTE FUNCTION core.dedup_forget_slot_consumers('1');

ALTER TABLE core.event_handled DROP CONSTRAINT event_handled_pkey;
ALTER TABLE core.event_handled
    ADD CONSTRAINT event_handled_pkey PRIMARY KEY (dedup_key, consumer, slot);
