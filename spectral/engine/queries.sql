-- The consumer engine's own statements. Each runs once per batch over arrays.

-- name: claim_keys
-- Record every key of the batch as handled; the answer is one array of the keys that were held
-- already (duplicates), empty when every key is new: on a live stream nothing comes back. Keys
-- are in their stored form (spectral/engine/keys.py: the idempotency key, compact when it is a
-- cluster_id:snapshot_hash).
-- core.event_handled is a ring of two slots (migration bounded_state;
-- docs/explanation/bounded-state.md): the current generation's slot and the previous one's. A key is new when neither slot
-- holds it: core.dedup_claim_held (migration dedup_claim_answers_held_keys) calls
-- core.dedup_claim (migrations dedup_claim_without_speculation, claim_planned_once,
-- dedup_claim_in_key_order, dedup_claim_probes_live_slots_only), which takes the keys in key
-- order and probes both slots for each key (one index probe per slot; before the ring's first rotation
-- only the current slot, the other having never held a generation; its plan, kept by the
-- session, is made with sequential and bitmap scans disabled) and inserts the others
-- into the current slot with a plain INSERT, whose uniqueness check settles races: a concurrent
-- transaction inserting the same key makes this one wait for it, and if it commits this
-- statement fails with a unique violation, which transaction.py retries (the retry finds the
-- key). This statement's lock on core.event_handled lasts until commit and a rotation needs an
-- exclusive one, so no rotation happens between the probe and the commit; a statement that
-- waited for a rotation reads the new current slot (its snapshot is taken after its locks): one
-- key never lands in both slots.
SELECT core.dedup_claim_held($1, $2::bytea[], $3::uuid[], $4::int[], $5::bigint[]);

-- name: mark_stale
-- Each key is found by one probe of the primary key and its row updated by its address
-- (core.dedup_rows_of), through core.dedup_mark_stale (migration dedup_marks_planned_once): one
-- plan per session, made with sequential and bitmap scans disabled, so it stays the same
-- whatever the planner knows of the table. A plain `dedup_key = ANY($2)` was planned as a scan
-- of all the consumer's rows when a slot had no statistics yet or row-level security added its
-- conditions (60-280 ms a batch at 200,000-600,000 keys).
SELECT core.dedup_mark_stale($1, $2::bytea[]);

-- name: forget
-- Deliveries the handler rejected were not applied: drop their rows so a redrive can apply them
-- (core.dedup_forget: the same probes and plan as mark_stale).
SELECT core.dedup_forget($1, $2::bytea[]);

-- name: mark_stale_literal
-- mark_stale sent in the message of the batch's COMMIT (transaction.py writes the literals in).
SELECT core.dedup_mark_stale({0}, {1});

-- name: forget_literal
-- forget sent in the message of the batch's COMMIT, as mark_stale_literal.
SELECT core.dedup_forget({0}, {1});
