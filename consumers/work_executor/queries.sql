-- Queries of consumers/work_executor/repository.py. Every write that belongs to a lease holder
-- is guarded by "lease_token = $token AND status IN ('claimed', 'running')": a worker whose
-- lease was re-claimed (stale recovery) changes nothing any more.

-- name: claim_delivered
-- ADR-0023 lease, the cheap conditional claim: only one replica wins an item, losers skip it
-- (SKIP LOCKED: a row another member is claiming right now is theirs). Items not due yet are
-- left for their delayed delivery. The items' threads start running.
WITH candidate AS (
    SELECT work_item_id
    FROM work.work_items
    WHERE work_item_id = ANY($1::uuid[])
      AND status IN ('queued', 'failed')
      AND not_before <= now()
    ORDER BY work_item_id
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE work.work_items w
    SET status = 'claimed', lease_token = $2, leased_at = now(), leased_by = $3
    FROM candidate c
    WHERE w.work_item_id = c.work_item_id
    RETURNING w.work_item_id, w.thread_id
), started AS (
    UPDATE work.threads t
    SET status = 'running', updated_at = now()
    WHERE t.thread_id IN (SELECT thread_id FROM claimed) AND t.status = 'open'
)
SELECT work_item_id FROM claimed

-- name: claim_due
-- The SKIP LOCKED sweep (ADR-0008): due items nobody claimed through an event within the grace
-- period (a lost wake-up cannot strand an item: the row is the queue of record).
WITH candidate AS (
    SELECT work_item_id
    FROM work.work_items
    WHERE status IN ('queued', 'failed')
      AND not_before <= now() - make_interval(secs => $4)
    ORDER BY not_before, work_item_id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE work.work_items w
    SET status = 'claimed', lease_token = $2, leased_at = now(), leased_by = $3
    FROM candidate c
    WHERE w.work_item_id = c.work_item_id
    RETURNING w.work_item_id, w.thread_id
), started AS (
    UPDATE work.threads t
    SET status = 'running', updated_at = now()
    WHERE t.thread_id IN (SELECT thread_id FROM claimed) AND t.status = 'open'
)
SELECT work_item_id FROM claimed

-- name: recover_stale
-- ADR-0023 stamp-based recovery: a lease older than the timeout belongs to a dead (or cut off)
-- worker; re-stamping it makes this worker the holder. What happened to the old holder's call
-- is then read from the ledger (plan.py).
WITH stale AS (
    SELECT work_item_id
    FROM work.work_items
    WHERE status IN ('claimed', 'running')
      AND leased_at < now() - make_interval(secs => $1)
    ORDER BY leased_at, work_item_id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE work.work_items w
SET status = 'claimed', lease_token = $3, leased_at = now(), leased_by = $4
FROM stale s
WHERE w.work_item_id = s.work_item_id
RETURNING w.work_item_id

-- name: load_item
SELECT w.work_item_id, w.thread_id, w.sequence, w.status, w.attempt, w.lock_scope,
       w.project_id, w.function_key, w.input::text AS input, w.not_before, w.lease_token,
       w.leased_at, w.error_message, w.created_at, w.started_at, w.finished_at,
       t.kind AS thread_kind, t.parent_thread_id, t.target_ref::text AS target_ref
FROM work.work_items w
JOIN work.threads t ON t.thread_id = w.thread_id
WHERE w.work_item_id = $1

-- name: item_ledger
SELECT entry_id, seq, thread_id, work_item_id, attempt, entry_type, payload::text AS payload,
       hash, created_at
FROM work.ledger_entries
WHERE work_item_id = $1
ORDER BY seq

-- name: get_document
SELECT document_id, version, content::text AS content
FROM work.documents
WHERE document_id = $1

-- name: lock_document
SELECT document_id, version, content::text AS content
FROM work.documents
WHERE document_id = $1
FOR UPDATE

-- name: start_attempt
-- Attempt n starts: counted before the paid call, in the transaction that records its prompt.
UPDATE work.work_items
SET status = 'running', attempt = attempt + 1, started_at = coalesce(started_at, now()),
    leased_at = now()
WHERE work_item_id = $1 AND lease_token = $2 AND status IN ('claimed', 'running')
  AND attempt = $3
RETURNING attempt

-- name: touch_lease
-- Guard of a lease holder's transaction: locks the item row and proves the lease is still ours.
UPDATE work.work_items
SET leased_at = now()
WHERE work_item_id = $1 AND lease_token = $2 AND status IN ('claimed', 'running')
RETURNING attempt

-- name: insert_entries
INSERT INTO work.ledger_entries (entry_id, thread_id, work_item_id, attempt, entry_type, payload,
                                 hash)
SELECT e.entry_id, e.thread_id, e.work_item_id, e.attempt, e.entry_type, e.payload::jsonb, e.hash
FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::integer[], $5::text[], $6::text[],
            $7::text[], $8::integer[])
    AS e (entry_id, thread_id, work_item_id, attempt, entry_type, payload, hash, ord)
ORDER BY e.ord
ON CONFLICT (work_item_id, attempt, entry_type)
    WHERE work_item_id IS NOT NULL AND entry_type <> 'error'
    DO NOTHING
RETURNING entry_id

-- name: release_for_retry
UPDATE work.work_items
SET status = 'failed', not_before = $3, error_message = $4,
    lease_token = NULL, leased_at = NULL, leased_by = NULL
WHERE work_item_id = $1 AND lease_token = $2 AND status IN ('claimed', 'running')
RETURNING attempt

-- name: dead_letter_item
UPDATE work.work_items
SET status = 'dead_letter', error_message = $3, finished_at = now(),
    lease_token = NULL, leased_at = NULL, leased_by = NULL
WHERE work_item_id = $1 AND lease_token = $2 AND status IN ('claimed', 'running')
RETURNING attempt

-- name: mark_applied
UPDATE work.work_items
SET status = 'applied', error_message = NULL, finished_at = now(),
    lease_token = NULL, leased_at = NULL, leased_by = NULL
WHERE work_item_id = $1 AND lease_token = $2 AND status IN ('claimed', 'running')
RETURNING attempt

-- name: close_thread
-- A thread closes when its live item ends (ADR-035 §7.1 step 5); a closed one stays closed.
UPDATE work.threads
SET status = $2, outcome = $3::jsonb, closed_at = now(), updated_at = now()
WHERE thread_id = $1 AND status IN ('open', 'running')
RETURNING parent_thread_id

-- name: insert_mutation
INSERT INTO work.mutations (mutation_id, work_item_id, thread_id, document_id, lock_scope,
                           operation, arguments, base_version, result_version)
VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, $8 + 1)
ON CONFLICT (mutation_id) DO NOTHING
RETURNING mutation_id

-- name: update_document
UPDATE work.documents
SET version = version + 1, content = $3::jsonb, content_hash = $4, updated_at = now()
WHERE document_id = $1 AND version = $2
RETURNING version

-- name: insert_document_version
INSERT INTO work.document_versions (document_id, version, content, content_hash, mutation_id)
VALUES ($1, $2, $3::jsonb, $4, $5)

-- name: lock_parent
SELECT thread_id, space_id, status, continue_on_error
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
  AND w.status IN ('queued', 'failed')
FOR UPDATE OF w SKIP LOCKED

-- name: cancel_items
UPDATE work.work_items
SET status = 'dead_letter', error_message = $2, finished_at = now()
WHERE work_item_id = ANY($1::uuid[]) AND status IN ('queued', 'failed')
RETURNING work_item_id, thread_id

-- name: cancel_threads
UPDATE work.threads
SET status = 'canceled', outcome = $2::jsonb, closed_at = now(), updated_at = now()
WHERE thread_id = ANY($1::uuid[]) AND status IN ('open', 'running')

-- name: close_parent
UPDATE work.threads
SET status = $2, outcome = $3::jsonb, closed_at = now(), updated_at = now()
WHERE thread_id = $1 AND status IN ('open', 'running')

-- name: parents_to_settle
-- Orchestrations with no live child left, or stop-on-error ones with a failed child and live
-- siblings: the sweep settles them (a crash between an item's end and its parent's settlement
-- cannot leave a parent open forever).
SELECT p.thread_id, p.space_id
FROM work.threads p
WHERE p.kind = 'story_generate_all' AND p.status IN ('open', 'running')
  AND (
    NOT EXISTS (SELECT 1 FROM work.threads c
                WHERE c.parent_thread_id = p.thread_id AND c.status IN ('open', 'running'))
    OR (NOT p.continue_on_error
        AND EXISTS (SELECT 1 FROM work.threads c
                    WHERE c.parent_thread_id = p.thread_id AND c.status IN ('failed', 'canceled')))
  )
ORDER BY p.created_at
LIMIT $1

-- name: queue_depth
SELECT status, count(*)::integer AS items
FROM work.work_items
WHERE status <> 'applied'
GROUP BY status

-- name: db_now
SELECT now()

-- name: parent_needs_settling
-- Cheap check before taking the project lock: is the orchestration still open, and is either
-- no child live any more, or a child failed while it stops on error? (Run after the child's own
-- transaction committed: of two last siblings finishing together, the later sees both done.)
SELECT p.status IN ('open', 'running')
       AND (
         NOT EXISTS (SELECT 1 FROM work.threads c
                     WHERE c.parent_thread_id = p.thread_id AND c.status IN ('open', 'running'))
         OR (NOT p.continue_on_error
             AND EXISTS (SELECT 1 FROM work.threads c
                         WHERE c.parent_thread_id = p.thread_id
                           AND c.status IN ('failed', 'canceled')))
       ) AS needed
FROM work.threads p
WHERE p.thread_id = $1
