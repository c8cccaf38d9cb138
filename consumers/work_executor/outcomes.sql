-- Queries of unknown outcomes (consumers/work_executor/outcomes.py): a call re-issued under its
-- idempotency key, and reservations left 'unknown' released at the horizon.

-- name: reissue_attempts
-- Attempt n of each item goes on: its unknown call is sent again under the same idempotency key,
-- against the same reservation. Only items whose lease ($2) is still held, whose attempt is
-- still n ($3) and whose cancellation nobody asked for go on.
WITH held AS (
    SELECT h.work_item_id, h.attempt
    FROM work.held_items($1::uuid[], $2::uuid[], false) AS h
    JOIN unnest($1::uuid[], $3::integer[]) AS s (work_item_id, attempt)
        ON s.work_item_id = h.work_item_id AND s.attempt = h.attempt
), going AS (
    UPDATE work.work_items w
    SET status = 'running', leased_at = now()
    FROM held h
    WHERE w.work_item_id = h.work_item_id
    RETURNING w.work_item_id, w.attempt
), counted AS (
    UPDATE work.spend s
    SET reissues = s.reissues + 1
    FROM going g
    WHERE s.work_item_id = g.work_item_id AND s.attempt = g.attempt
)
SELECT work_item_id, attempt FROM going

-- name: release_unknown_spend
-- Reservations whose call's outcome stayed unknown longer than the horizon ($1 seconds) are
-- released, once, and say so (at most $2 per sweep).
WITH old AS (
    SELECT work_item_id, attempt
    FROM work.spend
    WHERE state = 'unknown' AND reserved_at < now() - make_interval(secs => $1)
    ORDER BY reserved_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE work.spend s
SET state = 'released', released_unknown_at = now()
FROM old o
WHERE s.work_item_id = o.work_item_id AND s.attempt = o.attempt AND s.state = 'unknown'
RETURNING s.work_item_id, s.attempt, s.org_id, s.model, s.reserved_tokens, s.reserved_cost
