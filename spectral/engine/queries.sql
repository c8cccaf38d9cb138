-- The consumer engine's own statements. Each runs once per batch over arrays.

-- name: claim_keys
-- Record every key of the batch as handled; the keys returned are the new ones. Keys are in
-- their stored form (spectral/engine/keys.py: the idempotency key, compact when it is a
-- cluster_id:snapshot_hash).
-- core.event_handled is a ring of two slots (migration bounded_state;
-- docs/explanation/bounded-state.md): the current generation's slot and the previous one's. A key is new when neither slot
-- holds it: the previous slot is probed first (one index probe per key, LATERAL ... LIMIT 1 keeps
-- it a probe whatever the plan), then the insert into the current slot settles races (a
-- concurrent transaction inserting the same key waits on this row and then finds it). This
-- statement's lock on core.event_handled lasts until commit and a rotation needs an exclusive
-- one, so no rotation happens between the probe and the commit; a statement that waited for a
-- rotation reads the new current slot (its snapshot is taken after its locks): one key never
-- lands in both slots.
INSERT INTO core.event_handled
    (consumer, dedup_key, event_id, outcome, source_partition, source_offset, slot)
SELECT $1, t.k, t.e, 'applied', t.p, t.o, (SELECT core.dedup_current_slot())
FROM unnest($2::bytea[], $3::uuid[], $4::int[], $5::bigint[]) AS t (k, e, p, o)
LEFT JOIN LATERAL (
    SELECT true AS held
    FROM core.event_handled AS earlier
    WHERE earlier.consumer = $1
      AND earlier.dedup_key = t.k
      AND earlier.slot <> (SELECT core.dedup_current_slot())
    LIMIT 1
) AS previous ON true
WHERE previous.held IS NULL
ON CONFLICT (consumer, dedup_key, slot) DO NOTHING
RETURNING dedup_key;

-- name: mark_stale
-- Each key is found by one probe of the primary key and its row updated by its address
-- (core.dedup_rows_of): a plan that stays the same whatever the planner knows of the table. A
-- plain `dedup_key = ANY($2)` was planned as a scan of all the consumer's rows when a slot
-- had no statistics yet or row-level security added its conditions (60-280 ms a batch at
-- 200,000-600,000 keys).
UPDATE core.event_handled AS h SET outcome = 'stale'
FROM core.dedup_rows_of($1, $2::bytea[]) AS target
WHERE h.tableoid = target.tableoid AND h.ctid = target.ctid;

-- name: forget
-- Deliveries the handler rejected were not applied: drop their rows so a redrive can apply them.
DELETE FROM core.event_handled AS h
USING core.dedup_rows_of($1, $2::bytea[]) AS target
WHERE h.tableoid = target.tableoid AND h.ctid = target.ctid;
