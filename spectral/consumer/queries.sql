-- The consumer engine's own statements. Each runs once per batch over arrays.

-- name: claim_keys
-- Record every key of the batch as handled; the keys returned are the new ones. A concurrent
-- transaction inserting the same key waits on this row and then finds it: the dedup is race-free.
INSERT INTO core.event_handled
    (consumer, idempotency_key, event_id, outcome, source_partition, source_offset)
SELECT $1, k, e, 'applied', p, o
FROM unnest($2::text[], $3::uuid[], $4::int[], $5::bigint[]) AS t(k, e, p, o)
ON CONFLICT (consumer, idempotency_key) DO NOTHING
RETURNING idempotency_key;

-- name: mark_stale
UPDATE core.event_handled SET outcome = 'stale'
WHERE consumer = $1 AND idempotency_key = ANY($2::text[]);

-- name: forget
-- Deliveries the handler rejected were not applied: drop their rows so a redrive can apply them.
DELETE FROM core.event_handled WHERE consumer = $1 AND idempotency_key = ANY($2::text[]);
