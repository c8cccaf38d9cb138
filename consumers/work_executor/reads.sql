-- Queries of consumers/work_executor/reads.py: what the executor reads (no transition).

-- name: waiting_items
-- Which delivered items are still waiting for a claim (their delivery is a wake-up of the
-- executor's claims); the others are running, done or canceled: the delivery is stale.
SELECT work_item_id
FROM work.work_items
WHERE work_item_id = ANY($1::uuid[]) AND status IN ('queued', 'failed', 'parked')

-- name: load_items
-- The claimed items of a batch with their threads (one round trip for the batch), and whether
-- the spend of each one's next attempt is reserved (an attempt starts only against one).
SELECT w.work_item_id, w.thread_id, w.sequence, w.status, w.attempt, w.lock_scope,
       w.project_id, w.function_key, w.input::text AS input, w.not_before, w.lease_token,
       w.leased_at, w.error_message, w.created_at, w.started_at, w.finished_at, w.priority,
       w.tenant, w.org_id, w.cancel_requested_at, w.route,
       t.kind AS thread_kind, t.parent_thread_id, t.target_ref::text AS target_ref,
       EXISTS (SELECT 1 FROM work.spend s
               WHERE s.work_item_id = w.work_item_id AND s.attempt = w.attempt + 1
                 AND s.state = 'reserved') AS reserved
FROM work.work_items w
JOIN work.threads t ON t.thread_id = w.thread_id
WHERE w.work_item_id = ANY($1::uuid[])

-- name: load_bare_item
-- One item and its thread links, no JSON column read (the last resort of an item whose full
-- load fails: enough to dead-letter it).
SELECT w.work_item_id, w.thread_id, w.sequence, w.status, w.attempt, w.lock_scope,
       w.project_id, w.function_key, '{}' AS input, w.not_before, w.lease_token, w.leased_at,
       NULL::text AS error_message, w.created_at, w.started_at, w.finished_at,
       t.kind AS thread_kind, t.parent_thread_id
FROM work.work_items w
JOIN work.threads t ON t.thread_id = w.thread_id
WHERE w.work_item_id = $1

-- name: items_ledger
SELECT entry_id, seq, thread_id, work_item_id, attempt, entry_type, payload::text AS payload,
       hash, created_at
FROM work.ledger_entries
WHERE work_item_id = ANY($1::uuid[])
ORDER BY seq

-- name: get_documents
SELECT document_id, doc_type, version, content::text AS content
FROM work.documents
WHERE document_id = ANY($1::text[])

-- name: oldest_lease_age
-- Seconds since the oldest live lease was stamped (0 with none): past the lease timeout it is
-- stale and the sweep should recover it; the alert on work_oldest_lease_age_seconds says it did
-- not. Reads the partial index work_items_leased.
SELECT coalesce(extract(epoch FROM now() - min(leased_at)), 0)::float8
FROM work.work_items
WHERE status IN ('claimed', 'running')

-- name: unknown_outcome_spend
-- Reservations of calls whose outcome is unknown (the partial index spend_unknown_outcome).
SELECT count(*)::integer AS calls, coalesce(sum(reserved_tokens), 0)::bigint AS tokens
FROM work.spend
WHERE state = 'unknown'

-- name: queue_depth
-- The items of every status but the finished ones: the live items through the index that holds
-- them alone (work_items_one_live_per_thread: its predicate, word for word), the dead-lettered
-- ones through theirs (migration dead_lettered_items_indexed) — never the finished items, which
-- the work record keeps. A status with no item has no row.
SELECT status, count(*)::integer AS items
FROM work.work_items
WHERE status IN ('queued', 'claimed', 'running', 'failed', 'parked')
GROUP BY status
UNION ALL
SELECT 'dead_letter', count(*)::integer
FROM work.work_items
WHERE status = 'dead_letter'
HAVING count(*) > 0

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

-- name: parents_needing_settling
-- Cheap check before taking project locks: which of these orchestrations are still open with
-- either no live child left, or a failed child while they stop on error? (Run after the
-- children's own transactions committed: of two last siblings finishing together, the later
-- sees both done.) "Open or running" is written "closed_at IS NULL" (the same by the threads'
-- CHECK): with the status list the planner ANDs in the partial index of all live threads and
-- reads it whole for every parent while a backlog runs.
SELECT p.thread_id, p.space_id
FROM unnest($1::uuid[]) AS wanted (thread_id)
JOIN work.threads p ON p.thread_id = wanted.thread_id
WHERE p.closed_at IS NULL
  AND (
    NOT EXISTS (SELECT 1 FROM work.threads c
                WHERE c.parent_thread_id = p.thread_id AND c.closed_at IS NULL)
    OR (NOT p.continue_on_error
        AND EXISTS (SELECT 1 FROM work.threads c
                    WHERE c.parent_thread_id = p.thread_id
                      AND c.status IN ('failed', 'canceled')))
  )
ORDER BY p.thread_id
