-- The dedup claim probes and inserts a batch's keys in key order.
--
-- core.dedup_claim (0041 claim_planned_once) took the keys in the order the batch delivered them:
-- for keys that look random (a cluster's id and a snapshot's hash lead every stored key), each
-- probe of both slots and each insert into the current slot's primary key went down to a leaf
-- far from the previous one. Sorted first (one in-memory sort of the batch's keys, bytewise, as
-- the index orders them), consecutive probes and inserts walk the index from left to right: the
-- pages the previous key touched are still in the processor's caches, and both slots' indexes
-- are read in their own order. Measured (PostgreSQL CPU per key, 2,000-key claims of fresh keys,
-- interleaved, the sort's own cost included; load 13-16): 8.81 -> 7.81 us (first claims),
-- 5.0 -> 4.63 us (every key already held).
--
-- Two claims of overlapping keys now also insert them in the same order, so two members that
-- received the same keys in different orders (a rebalance's redelivery) no longer wait on each
-- other crosswise: the second waits for the first's key and, once it commits, fails with the
-- unique violation transaction.py retries, as before. The statement, its plan settings (index
-- probes only, one generic plan per session, no JIT), its result (the keys new to the consumer,
-- now in key order: the engine reads them as a set), its barrier with a rotation and its
-- row-level security are otherwise 0041's.

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
        WHERE earlier.consumer = of_consumer AND earlier.dedup_key = t.k
        LIMIT 1
    ) AS found ON true
    WHERE found.held IS NULL
    RETURNING h.dedup_key;
END
$fn$;
