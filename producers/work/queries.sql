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

-- name: insert_threads
-- A racing command that created a live thread for one of these identities first wins: its row
-- makes ours conflict on threads_one_active_per_identity and ours is not inserted (the caller
-- resolves again and finds the winner).
INSERT INTO work.threads (thread_id, kind, space_type, space_id, target_ref, status,
                          parent_thread_id, idempotency_key, continue_on_error)
SELECT t.thread_id, t.kind, 'project', t.space_id, t.target_ref::jsonb, t.status,
       t.parent_thread_id, t.idempotency_key, t.continue_on_error
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::uuid[], $7::text[],
            $8::boolean[])
    AS t (thread_id, kind, space_id, target_ref, status, parent_thread_id, idempotency_key,
          continue_on_error)
ON CONFLICT (idempotency_key) WHERE status IN ('open', 'running') DO NOTHING
RETURNING thread_id

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

-- name: next_sequences
SELECT t.thread_id, coalesce(max(w.sequence), 0) + 1 AS next_sequence
FROM unnest($1::uuid[]) AS t (thread_id)
LEFT JOIN work.work_items w ON w.thread_id = t.thread_id
GROUP BY t.thread_id

-- name: insert_items
INSERT INTO work.work_items (work_item_id, thread_id, sequence, status, lock_scope, project_id,
                             function_key, input, not_before)
SELECT i.work_item_id, i.thread_id, i.sequence, 'queued', i.lock_scope, i.project_id,
       i.function_key, i.input::jsonb, $9
FROM unnest($1::uuid[], $2::uuid[], $3::integer[], $4::text[], $5::text[], $6::text[],
            $7::text[], $8::integer[])
    AS i (work_item_id, thread_id, sequence, lock_scope, project_id, function_key, input, ord)
ORDER BY i.ord

-- name: close_thread
UPDATE work.threads
SET status = $2, outcome = $3::jsonb, closed_at = now(), updated_at = now()
WHERE thread_id = $1 AND status IN ('open', 'running')

-- name: get_document
SELECT document_id, project_id, doc_type, version, content::text AS content, content_hash
FROM work.documents
WHERE document_id = $1

-- name: insert_document
INSERT INTO work.documents (document_id, project_id, doc_type, version, content, content_hash)
VALUES ($1, $2, $3, 1, $4::jsonb, $5)
ON CONFLICT (document_id) DO NOTHING
RETURNING document_id

-- name: insert_first_version
INSERT INTO work.document_versions (document_id, version, content, content_hash)
VALUES ($1, 1, $2::jsonb, $3)

