-- Queries of the shared work domain (spectral/work): locks and the read side.

-- name: advisory_xact_lock
-- Wait for the transaction-scoped advisory lock (kind, scope hash); released at COMMIT/ROLLBACK.
SELECT pg_advisory_xact_lock($1::int, $2::int)

-- name: advisory_xact_locks
-- Several of them in one round trip, waited for one after the other in the arrays' order (the
-- rows of unnest come in array order; the caller sorts them by the lock-order rule).
SELECT count(pg_advisory_xact_lock(l.kind, l.objid))
FROM unnest($1::int[], $2::int[]) AS l (kind, objid)

-- name: get_thread
SELECT thread_id, kind, space_type, space_id, target_ref::text AS target_ref, status,
       parent_thread_id, idempotency_key, continue_on_error, outcome::text AS outcome,
       created_at, updated_at, closed_at, requested_by, requested_by_login
FROM work.threads
WHERE thread_id = $1

-- name: child_threads
SELECT thread_id, kind, space_type, space_id, target_ref::text AS target_ref, status,
       parent_thread_id, idempotency_key, continue_on_error, outcome::text AS outcome,
       created_at, updated_at, closed_at
FROM work.threads
WHERE parent_thread_id = $1
ORDER BY created_at, thread_id

-- name: thread_items
SELECT work_item_id, thread_id, sequence, status, attempt, lock_scope, project_id, function_key,
       input::text AS input, not_before, lease_token, leased_at, error_message, created_at,
       started_at, finished_at
FROM work.work_items
WHERE thread_id = $1
ORDER BY sequence

-- name: project_threads
-- Newest first; $2 = true keeps only open|running threads (ADR-035 §12 ?active=true);
-- $4, $5 = the (created_at, thread_id) to continue after (a page's last row; NULL = the start).
SELECT thread_id, kind, space_type, space_id, target_ref::text AS target_ref, status,
       parent_thread_id, idempotency_key, continue_on_error, outcome::text AS outcome,
       created_at, updated_at, closed_at, requested_by, requested_by_login
FROM work.threads
WHERE space_type = 'project' AND space_id = $1
  AND (NOT $2::boolean OR status IN ('open', 'running'))
  AND ($4::timestamptz IS NULL
       OR created_at < $4::timestamptz
       OR (created_at = $4::timestamptz AND thread_id > $5::uuid))
ORDER BY created_at DESC, thread_id
LIMIT $3

-- name: ledger_of_threads
SELECT entry_id, seq, thread_id, work_item_id, attempt, entry_type, payload::text AS payload,
       hash, created_at
FROM work.ledger_entries
WHERE thread_id = ANY($1::uuid[])
ORDER BY seq

-- name: get_document
SELECT document_id, project_id, doc_type, version, content::text AS content, updated_at
FROM work.documents
WHERE document_id = $1
