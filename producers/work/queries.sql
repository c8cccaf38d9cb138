-- Queries of producers/work/repository.py: the command side of threads and work items.

-- name: act_as
-- The acting principal of this transaction: the default of work.threads.requested_by
-- (core.current_actor, migration 0008).
SELECT set_config('spectral.actor', $1::text, true)

-- name: latest_threads_for_update
-- The thread each identity resolves to — its live one if any, else its newest — locked, so
-- two commands reopening or adopting the same thread serialise on it. (Decisions taken on these
-- rows are re-checked by the guarded writes that follow: the live-thread index and the status
-- conditions of reopen_threads.)
SELECT thread_id, kind, space_type, space_id, target_ref::text AS target_ref, status,
       parent_thread_id, idempotency_key, continue_on_error, outcome::text AS outcome,
       created_at, updated_at, closed_at
FROM work.threads
WHERE thread_id IN (
    SELECT DISTINCT ON (idempotency_key) thread_id
    FROM work.threads
    WHERE idempotency_key = ANY($1::text[])
    ORDER BY idempotency_key, (status IN ('open', 'running')) DESC, created_at DESC, thread_id
)
ORDER BY idempotency_key
FOR UPDATE

-- name: reopen_threads
-- User-triggered retry: a failed or canceled thread opens again (a new work item follows).
UPDATE work.threads AS t
SET status = r.status, closed_at = NULL, outcome = NULL, updated_at = now(),
    parent_thread_id = coalesce(r.parent_thread_id, t.parent_thread_id)
FROM unnest($1::uuid[], $2::text[], $3::uuid[]) AS r (thread_id, status, parent_thread_id)
WHERE t.thread_id = r.thread_id AND t.status IN ('failed', 'canceled')
RETURNING t.thread_id

-- name: adopt_threads
UPDATE work.threads AS t
SET parent_thread_id = $2, updated_at = now()
WHERE t.thread_id = ANY($1::uuid[])
RETURNING t.thread_id

-- name: close_thread
UPDATE work.threads
SET status = $2, outcome = $3::jsonb, closed_at = now(), updated_at = now()
WHERE thread_id = $1 AND status IN ('open', 'running')

-- name: get_document
SELECT document_id, project_id, doc_type, version, content::text AS content, content_hash
FROM work.documents
WHERE document_id = $1

-- name: thread_for_cancel
SELECT thread_id, kind, space_id, status, parent_thread_id, cancel_requested_at
FROM work.threads
WHERE thread_id = $1

-- name: child_ids
SELECT thread_id FROM work.threads WHERE parent_thread_id = $1

-- name: live_items_for_cancel
-- The live items of these threads, row-locked in id order (the order every writer of items
-- takes them in) before their threads are.
SELECT work_item_id, thread_id, status, attempt, lock_scope
FROM work.work_items
WHERE thread_id = ANY($1::uuid[])
  AND status IN ('queued', 'failed', 'parked', 'claimed', 'running')
ORDER BY work_item_id
FOR UPDATE

-- name: lock_threads_for_cancel
SELECT thread_id, status, parent_thread_id, cancel_requested_at
FROM work.threads
WHERE thread_id = ANY($1::uuid[])
ORDER BY thread_id
FOR UPDATE

-- name: request_cancel
UPDATE work.threads
SET cancel_requested_at = now(), cancel_requested_by = core.current_actor(),
    cancel_reason = $2, updated_at = now()
WHERE thread_id = ANY($1::uuid[]) AND status IN ('open', 'running')
  AND cancel_requested_at IS NULL
RETURNING thread_id, core.current_actor() AS actor

-- name: flag_leased_items
-- Items a worker holds: their holder ends them canceled at its next step.
UPDATE work.work_items
SET cancel_requested_at = now()
WHERE work_item_id = ANY($1::uuid[]) AND status IN ('claimed', 'running')
  AND cancel_requested_at IS NULL
RETURNING work_item_id

-- name: release_unstarted_spend_of_canceled
-- The reservations of flagged items' attempts that have not started (claimed, not called): no
-- attempt of an item whose cancellation was asked for can start, so they are released now,
-- whatever becomes of the holder. A call in flight keeps its reservation until it settles.
UPDATE work.spend s
SET state = 'released'
FROM work.work_items w
WHERE w.work_item_id = ANY($1::uuid[]) AND s.work_item_id = w.work_item_id
  AND s.attempt > w.attempt AND s.state = 'reserved'

-- name: close_canceled_threads
-- Threads whose cancellation was asked for and that have no live item left close canceled.
UPDATE work.threads t
SET status = 'canceled', outcome = $2::jsonb, closed_at = now(), updated_at = now()
WHERE t.thread_id = ANY($1::uuid[]) AND t.status IN ('open', 'running')
  AND t.cancel_requested_at IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM work.work_items w
                  WHERE w.thread_id = t.thread_id
                    AND w.status IN ('queued', 'failed', 'parked', 'claimed', 'running'))
  AND NOT EXISTS (SELECT 1 FROM work.threads c
                  WHERE c.parent_thread_id = t.thread_id AND c.status IN ('open', 'running'))
RETURNING t.thread_id

-- name: child_statuses
SELECT status, count(*)::integer AS n
FROM work.threads
WHERE parent_thread_id = $1
GROUP BY status

-- name: upsert_budget
INSERT INTO work.budgets (org_id, period, token_limit, cost_limit)
VALUES ($1, $2, $3, $4)
ON CONFLICT (org_id) DO UPDATE
    SET period = excluded.period, token_limit = excluded.token_limit,
        cost_limit = excluded.cost_limit, updated_at = now(),
        updated_by = core.current_actor()

-- name: delete_budget
DELETE FROM work.budgets WHERE org_id = $1 RETURNING org_id

-- name: upsert_scope_budget
-- The budget of a project, thread or model route ($1 kind, $2 id).
INSERT INTO work.scope_budgets (scope_kind, scope_id, period, token_limit, cost_limit)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (scope_kind, scope_id) DO UPDATE
    SET period = excluded.period, token_limit = excluded.token_limit,
        cost_limit = excluded.cost_limit, updated_at = now(),
        updated_by = core.current_actor()

-- name: delete_scope_budget
DELETE FROM work.scope_budgets WHERE scope_kind = $1 AND scope_id = $2 RETURNING scope_id

-- name: resume_scope
-- A changed budget resumes the items it parked at once ($1 kind, $2 id; they are parked again
-- by the next claim if it still does not allow a call).
WITH parked AS (
    SELECT work_item_id
    FROM work.work_items
    WHERE park_scope_kind = $1 AND park_scope_id = $2 AND status = 'parked'
    ORDER BY work_item_id
    FOR UPDATE
)
UPDATE work.work_items w
SET status = CASE WHEN w.attempt > 0 THEN 'failed' ELSE 'queued' END, park_reason = NULL,
    parked_at = NULL, park_scope_kind = NULL, park_scope_id = NULL
FROM parked p
WHERE w.work_item_id = p.work_item_id
RETURNING w.work_item_id
