-- Queries of consumers/work_executor/parents.py: closing orchestrations (ADR-035 §7.2), under
-- the project lock.

-- name: lock_parent
SELECT thread_id, space_id, status, continue_on_error, cancel_requested_at
FROM work.threads
WHERE thread_id = $1
FOR UPDATE

-- name: children_of
SELECT c.thread_id, c.status, c.target_ref ->> 'epic_id' AS epic_id
FROM work.threads c
WHERE c.parent_thread_id = $1
ORDER BY c.created_at, c.thread_id

-- name: cancelable_items
-- Items of a stop-on-error orchestration's children that have not started a paid call and
-- hold no lease: they are canceled when a sibling failed.
SELECT w.work_item_id, w.thread_id, w.attempt, w.lock_scope
FROM work.work_items w
JOIN work.threads c ON c.thread_id = w.thread_id
WHERE c.parent_thread_id = $1 AND c.status IN ('open', 'running')
  AND w.status IN ('queued', 'failed', 'parked')
FOR UPDATE OF w SKIP LOCKED

-- name: cancel_threads
UPDATE work.threads
SET status = 'canceled', outcome = $2::jsonb, closed_at = now(), updated_at = now()
WHERE thread_id = ANY($1::uuid[]) AND status IN ('open', 'running')

-- name: close_parent
UPDATE work.threads
SET status = $2, outcome = $3::jsonb, closed_at = now(), updated_at = now()
WHERE thread_id = $1 AND status IN ('open', 'running')
