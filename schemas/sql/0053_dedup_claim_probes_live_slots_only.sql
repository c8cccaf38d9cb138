-- The dedup claim probes only the slots that hold a generation.
--
-- core.dedup_claim (0050 dedup_claim_in_key_order) probed both slots of the ring for every key.
-- Until the ring's first rotation only one slot holds a generation: the other has never been
-- current, so no claim ever inserted into it, yet each key's probe still went down its (empty)
-- primary key: a read of its metapage and a rescan of its index scan per key. The probe now
-- keeps to the slots between the lowest and the highest slot of the generations not forgotten
-- (core.dedup_generations, forgotten_at NULL: the current generation's, and the previous one's
-- while it is remembered), two values read once per statement; the partitions outside that
-- range are pruned when the statement starts, so their indexes are not touched. Once both slots
-- hold a generation (after the first rotation, for ever after) the range is both slots and the
-- claim is 0050's, key for key.
--
-- Why no key that a slot holds can be missed: spectral writes core.event_handled only through
-- this claim, into the slot of the generation current in the claim's own snapshot (0011 made
-- the existing rows generation 1 in slot 0); a slot is emptied (TRUNCATE) in the transaction
-- that marks its generation forgotten. So every row is in the slot of a generation not
-- forgotten, as read by any snapshot that sees the row. (A row some other writer put into a
-- slot that holds no generation would be seen once that slot becomes current, at the next
-- rotation.) The
-- snapshot the range is read with is the statement's, taken after the statement's lock on
-- core.event_handled was granted (0011 bounded_state): a rotation (ACCESS EXCLUSIVE, one
-- transaction: TRUNCATE, forget, end, start) is either wholly before it (the range and the rows
-- both after the rotation) or waits for this transaction to end. The current generation is
-- never forgotten, so its slot, where the keys are inserted, is always within the range; a ring
-- without a current generation still fails the claim as an infrastructure fault (class 57, from
-- core.dedup_current_slot). The insert, its uniqueness check that settles a race between two
-- members, its result, its order, its plan settings and its row-level security are 0050's.
--
-- Measured (PostgreSQL CPU per key of the claim, 2,000-key claims of 100,000 fresh keys into a
-- slot of 100,000, first generation, alternated rounds): 5.28 -> 4.73 us (6 rounds, load
-- 3.5-4.6) and 5.78 -> 5.33 us (4 rounds, load 6.3-7.1), lower in every pair; the same claims
-- of keys already held 2.82 -> 2.55 us. 20-key claims, and 2,000-key claims after a rotation
-- (both slots holding 100,000 keys), equal within noise.

CREATE OR REPLACE FUNCTION core.dedup_claim(
    of_consumer text, keys bytea[], events uuid[], partitions integer[], offsets bigint[]
)
RETURNS SETOF bytea
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $fn$
BEGIN
    RETURN QUERY
    INSERT INTO core.event_handled AS h
        (consumer, dedup_key, event_id, outcome, source_partition, source_offset, slot)
    SELECT of_consumer, t.k, t.e, 'applied', t.p, t.o, (SELECT core.dedup_current_slot())
    FROM (
        SELECT u.k, u.e, u.p, u.o
        FROM unnest(keys, events, partitions, offsets) AS u (k, e, p, o)
        ORDER BY u.k
    ) AS t
    LEFT JOIN LATERAL (
        SELECT true AS held
        FROM core.event_handled AS earlier
        WHERE earlier.dedup_key = t.k AND earlier.consumer = of_consumer
          AND earlier.slot >= (SELECT min(g.slot) FROM core.dedup_generations AS g
                               WHERE g.forgotten_at IS NULL)
          AND earlier.slot <= (SELECT max(g.slot) FROM core.dedup_generations AS g
                               WHERE g.forgotten_at IS NULL)
        LIMIT 1
    ) AS found ON true
    WHERE found.held IS NULL
    RETURNING h.dedup_key;
END
$fn$;
