-- Queries of the shared work domain (producers/work/domain): locks and the read side.

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
       created_at, updated_at, closed_at, requested_by, cancel_requested_at,
       cancel_requested_by, cancel_reason, requested_by_login
FROM work.threads
WHERE thread_id = $1

-- name: child_threads
SELECT thread_id, kind, space_type, space_id, target_ref::text AS target_ref, status,
       parent_thread_id, idempotency_key, continue_on_error, outcome::text AS outcome,
       created_at, updated_at, closed_at, cancel_requested_at, cancel_requested_by,
       cancel_reason
FROM work.threads
WHERE parent_thread_id = $1
ORDER BY created_at, thread_id

-- name: thread_items
SELECT work_item_id, thread_id, sequence, status, attempt, lock_scope, project_id, function_key,
       input::text AS input, not_before, lease_token, leased_at, error_message, created_at,
       started_at, finished_at, priority, tenant, org_id, cancel_requested_at, park_reason,
       route
FROM work.work_items
WHERE thread_id = $1
ORDER BY sequence

-- name: project_threads
-- Newest first; $2 = true keeps only open|running threads (ADR-035 §12 ?active=true);
-- $4, $5 = the (created_at, thread_id) to continue after (a page's last row; NULL = the start).
SELECT thread_id, kind, space_type, space_id, target_ref::text AS target_ref, status,
       parent_thread_id, idempotency_key, continue_on_error, outcome::text AS outcome,
       created_at, updated_at, closed_at, requested_by, cancel_requested_at,
       cancel_requested_by, cancel_reason, requested_by_login
FROM work.threads
WHERE space_type = 'project' AND space_id = $1
  AND (NOT $2::boolean OR status IN ('open', 'running'))
  AND ($4::timestamptz IS NULL
       OR created_at < $4::timestamptz
       OR (created_at = $4::timestamptz AND thread_id > $5::uuid))
ORDER BY created_at DESC, thread_id
LIMIT $3

-- name: projects
-- The projects that have threads, the most recently active first: top-level threads, those
-- open or running, and the latest thread's creation. $1 = at most this many projects.
SELECT space_id AS project_id,
       count(*) FILTER (WHERE parent_thread_id IS NULL) AS threads,
       count(*) FILTER (WHERE parent_thread_id IS NULL AND status IN ('open', 'running'))
           AS active,
       max(created_at) AS last_thread_at
FROM work.threads
WHERE space_type = 'project'
GROUP BY space_id
ORDER BY max(created_at) DESC, space_id
LIMIT $1

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

-- name: budgets_with_spend
-- Each org's budget and what it spent in the current period: settled usage, else the
-- reservation (a reservation whose call's outcome is unknown counts in full), nothing for a
-- released one. $1 = the orgs (NULL = every org with a budget).
SELECT b.org_id, b.period, b.token_limit, b.cost_limit, b.updated_at, b.updated_by,
       work.period_start(b.period, now()) AS period_start,
       coalesce(s.tokens, 0)::bigint AS tokens, coalesce(s.cost, 0)::numeric AS cost,
       coalesce(s.outstanding, 0)::integer AS outstanding,
       (SELECT count(*) FROM work.work_items w
        WHERE w.status = 'parked' AND w.org_id = b.org_id)::integer AS parked
FROM work.budgets b
LEFT JOIN LATERAL (
    SELECT sum(CASE x.state WHEN 'settled' THEN x.tokens WHEN 'released' THEN 0
                            ELSE x.reserved_tokens END) AS tokens,
           sum(CASE x.state WHEN 'settled' THEN x.cost WHEN 'released' THEN 0
                            ELSE x.reserved_cost END) AS cost,
           count(*) FILTER (WHERE x.state = 'reserved') AS outstanding
    FROM work.spend x
    WHERE x.org_id = b.org_id AND x.reserved_at >= work.period_start(b.period, now())
) s ON true
WHERE $1::text[] IS NULL OR b.org_id = ANY($1::text[])
ORDER BY b.org_id

-- name: spend_over_period
-- Each budgeted org's spend so far in its current period, counted as budgets_with_spend counts
-- it, cumulated over time: one point per minute (an hourly budget), day (a monthly or total
-- one) or hour (the others) in which a reservation was made, oldest first.
WITH buckets AS (
    SELECT b.org_id,
           date_trunc(CASE b.period WHEN 'hour' THEN 'minute'
                                    WHEN 'month' THEN 'day'
                                    WHEN 'total' THEN 'day'
                                    ELSE 'hour' END, x.reserved_at, 'UTC') AS at,
           sum(CASE x.state WHEN 'settled' THEN x.tokens WHEN 'released' THEN 0
                            ELSE x.reserved_tokens END) AS tokens,
           sum(CASE x.state WHEN 'settled' THEN x.cost WHEN 'released' THEN 0
                            ELSE x.reserved_cost END) AS cost
    FROM work.budgets b
    JOIN work.spend x
      ON x.org_id = b.org_id AND x.reserved_at >= work.period_start(b.period, now())
    GROUP BY 1, 2
)
SELECT org_id, at,
       (sum(tokens) OVER w)::bigint AS tokens,
       (sum(cost) OVER w)::numeric AS cost
FROM buckets
WINDOW w AS (PARTITION BY org_id ORDER BY at)
ORDER BY org_id, at

-- name: insert_entries
-- Ledger entries, in order; one already recorded for its (item, attempt, type) is skipped
-- (errors are not limited).
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

-- name: cancel_waiting_items
-- Items no worker holds (queued, waiting for a retry, parked) end canceled: no call was made.
UPDATE work.work_items
SET status = 'canceled', error_message = $2, finished_at = now(), park_reason = NULL,
    parked_at = NULL
WHERE work_item_id = ANY($1::uuid[]) AND status IN ('queued', 'failed', 'parked')
RETURNING work_item_id, thread_id, attempt, lock_scope

-- name: append_cancellation_entries
SELECT e AS entry_id
FROM work.append_cancellation_entries($1::uuid[], $2::uuid[], $3::uuid[], $4::integer[],
                                      $5::text[], $6::text[]) AS e
