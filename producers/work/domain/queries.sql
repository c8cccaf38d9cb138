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
-- The index threads_by_space_in_page_order holds this order; `created_at <= coalesce($4,
-- 'infinity')` repeats the keyset's bound as a condition it starts from, in custom and generic
-- plans alike: a later page reads from the cursor on, in order, and stops at its last row (the
-- OR below alone is no index condition: 200,000 threads, the page after the 100,000th read
-- 100,000 rows).
SELECT thread_id, kind, space_type, space_id, target_ref::text AS target_ref, status,
       parent_thread_id, idempotency_key, continue_on_error, outcome::text AS outcome,
       created_at, updated_at, closed_at, requested_by, cancel_requested_at,
       cancel_requested_by, cancel_reason, requested_by_login
FROM work.threads
WHERE space_type = 'project' AND space_id = $1
  AND (NOT $2::boolean OR status IN ('open', 'running'))
  AND created_at <= coalesce($4::timestamptz, 'infinity'::timestamptz)
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
-- Each budget (every scope kind: work.budget_scopes) and what its scope spent in the current
-- period (what counts: migration 0036), read from the running totals (migration 0031): the
-- scope's buckets of its period's kind from the period start on, plus the changes not folded
-- into them yet; the same figures as budgets_from_ledger, in one snapshot. $1, $2 = the scopes'
-- kinds and ids (NULL = every budget).
SELECT *
FROM work.budgets_with_spend($1::text[], $2::text[], from_ledger => false)
ORDER BY scope_kind <> 'org', scope_kind, scope_id

-- name: budgets_from_ledger
-- The same as budgets_with_spend, summed from the spend rows themselves (every row of the
-- period: the audit of the running totals, not for a hot path).
SELECT *
FROM work.budgets_with_spend($1::text[], $2::text[], from_ledger => true)
ORDER BY scope_kind <> 'org', scope_kind, scope_id

-- name: spend_over_period
-- Each budgeted org's spend so far in its current period, counted as budgets_with_spend counts
-- it (migration 0036), cumulated over time, oldest first. An hourly or daily budget: one
-- point per minute or hour in which a reservation was made, summed from the period's spend
-- rows (at most a day of them); a minute or hour whose rows count nothing (released) has no
-- point. A weekly, monthly or total budget: one point per day, read from
-- the running totals' day buckets and the changes not folded into them yet (migration 0031), so
-- the page reads at most 31 days' total rows however many spend rows the period holds. A total
-- budget's chart starts 31 days back (the day buckets kept), at what was spent before them:
-- its total bucket less the days shown, plus the changes of earlier days not folded yet.
-- $1 = the orgs (NULL = every budgeted org).
WITH budget AS (
    SELECT org_id, period,
           greatest(work.period_start(period, now()),
                    date_trunc('day', now(), 'UTC') - interval '31 days') AS since
    FROM work.budgets
    WHERE $1::text[] IS NULL OR org_id = ANY ($1::text[])
), spent AS (
    SELECT b.org_id,
           date_trunc(CASE b.period WHEN 'hour' THEN 'minute' ELSE 'hour' END, x.reserved_at,
                      'UTC') AS at,
           CASE x.state WHEN 'settled' THEN x.tokens WHEN 'released' THEN 0
                        ELSE x.reserved_tokens END AS tokens,
           CASE x.state WHEN 'settled' THEN x.cost WHEN 'released' THEN 0
                        ELSE x.reserved_cost END AS cost,
           false AS start
    FROM budget b
    JOIN work.spend x ON x.org_id = b.org_id AND x.reserved_at >= b.since
    WHERE b.period IN ('hour', 'day')
    UNION ALL
    SELECT b.org_id, t.bucket_start, t.tokens, t.cost, false
    FROM budget b
    JOIN work.spend_totals t
      ON t.scope_kind = 'org' AND t.scope_id = b.org_id AND t.bucket = 'day'
     AND t.bucket_start >= b.since
    WHERE b.period IN ('week', 'month', 'total')
    UNION ALL
    SELECT b.org_id, date_trunc('day', c.reserved_hour, 'UTC'), c.tokens, c.cost, false
    FROM budget b
    JOIN work.spend_changes c ON c.org_id = b.org_id AND c.reserved_hour >= b.since
    WHERE b.period IN ('week', 'month', 'total')
    UNION ALL
    SELECT b.org_id, b.since,
           coalesce(t.tokens, 0) - coalesce(d.tokens, 0) + coalesce(u.tokens, 0),
           coalesce(t.cost, 0) - coalesce(d.cost, 0) + coalesce(u.cost, 0),
           true
    FROM budget b
    LEFT JOIN work.spend_totals t
      ON t.scope_kind = 'org' AND t.scope_id = b.org_id AND t.bucket = 'total'
    CROSS JOIN LATERAL (
        SELECT sum(s.tokens) AS tokens, sum(s.cost) AS cost
        FROM work.spend_totals s
        WHERE s.scope_kind = 'org' AND s.scope_id = b.org_id AND s.bucket = 'day'
          AND s.bucket_start >= b.since
    ) d
    LEFT JOIN (
        -- the changes of earlier days not folded yet, of every total budget's org at once (a
        -- subquery per org would read every change once per org: no index leads with org_id)
        SELECT c.org_id, sum(c.tokens) AS tokens, sum(c.cost) AS cost
        FROM budget o
        JOIN work.spend_changes c ON c.org_id = o.org_id AND c.reserved_hour < o.since
        WHERE o.period = 'total'
        GROUP BY c.org_id
    ) u ON u.org_id = b.org_id
    WHERE b.period = 'total'
), buckets AS (
    SELECT org_id, at, sum(tokens) AS tokens, sum(cost) AS cost
    FROM spent
    GROUP BY org_id, at
    HAVING sum(tokens) <> 0 OR sum(cost) <> 0 OR bool_or(start)
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
    parked_at = NULL, park_scope_kind = NULL, park_scope_id = NULL
WHERE work_item_id = ANY($1::uuid[]) AND status IN ('queued', 'failed', 'parked')
RETURNING work_item_id, thread_id, attempt, lock_scope

-- name: append_cancellation_entries
SELECT e AS entry_id
FROM work.append_cancellation_entries($1::uuid[], $2::uuid[], $3::uuid[], $4::integer[],
                                      $5::text[], $6::text[]) AS e

-- Opening work (enqueue.py): threads, their items and the documents they change.

-- name: insert_threads
-- A racing command that created a live thread for one of these identities first wins: its row
-- makes ours conflict on threads_one_active_per_identity and ours is not inserted (the caller
-- resolves again and finds the winner).
INSERT INTO work.threads (thread_id, kind, space_type, space_id, target_ref, status,
                          parent_thread_id, idempotency_key, continue_on_error)
SELECT t.thread_id, t.kind, t.space_type, t.space_id, t.target_ref::jsonb, t.status,
       t.parent_thread_id, t.idempotency_key, t.continue_on_error
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::uuid[], $7::text[],
            $8::boolean[], $9::text[])
    AS t (thread_id, kind, space_id, target_ref, status, parent_thread_id, idempotency_key,
          continue_on_error, space_type)
ON CONFLICT (idempotency_key) WHERE status IN ('open', 'running') DO NOTHING
RETURNING thread_id

-- name: next_sequences
SELECT t.thread_id, coalesce(max(w.sequence), 0) + 1 AS next_sequence
FROM unnest($1::uuid[]) AS t (thread_id)
LEFT JOIN work.work_items w ON w.thread_id = t.thread_id
GROUP BY t.thread_id

-- name: insert_items
-- $10, $11: the items' priority and its delay in seconds (rank_at = enqueue time + delay);
-- $12: each one's bound of its prompt's UTF-8 length.
INSERT INTO work.work_items (work_item_id, thread_id, sequence, status, lock_scope, project_id,
                             function_key, input, not_before, priority, rank_at, prompt_bytes)
SELECT i.work_item_id, i.thread_id, i.sequence, 'queued', i.lock_scope, i.project_id,
       i.function_key, i.input::jsonb, $9::timestamptz, $10,
       $9::timestamptz + make_interval(secs => $11::float8), i.prompt_bytes
FROM unnest($1::uuid[], $2::uuid[], $3::integer[], $4::text[], $5::text[], $6::text[],
            $7::text[], $8::integer[], $12::integer[])
    AS i (work_item_id, thread_id, sequence, lock_scope, project_id, function_key, input, ord,
          prompt_bytes)
ORDER BY i.ord

-- name: insert_document
INSERT INTO work.documents (document_id, project_id, doc_type, version, content, content_hash)
VALUES ($1, $2, $3, 1, $4::jsonb, $5)
ON CONFLICT (document_id) DO NOTHING
RETURNING document_id

-- name: insert_first_version
INSERT INTO work.document_versions (document_id, version, content, content_hash)
VALUES ($1, 1, $2::jsonb, $3)

-- name: work_of_identities
-- The newest thread of each identity, with its newest item: what a feature that enqueues work
-- of its own (the rule stub) decides on.
SELECT DISTINCT ON (t.idempotency_key)
       t.idempotency_key, t.thread_id, t.status, t.created_at, i.status AS item_status,
       i.attempt
FROM work.threads t
LEFT JOIN LATERAL (
    SELECT w.status, w.attempt FROM work.work_items w
    WHERE w.thread_id = t.thread_id ORDER BY w.sequence DESC LIMIT 1
) i ON true
WHERE t.idempotency_key = ANY($1::text[])
ORDER BY t.idempotency_key, t.created_at DESC, t.thread_id

-- name: lock_live_items_of_threads
-- The live items of these threads, row-locked in id order (as every writer of items takes them).
SELECT w.work_item_id, w.thread_id, w.status
FROM work.work_items w
WHERE w.thread_id = ANY($1::uuid[])
  AND w.status IN ('queued', 'claimed', 'running', 'failed', 'parked')
ORDER BY w.work_item_id
FOR UPDATE

-- name: ask_to_cancel_items
-- Items a worker holds: their holder ends them canceled at its next step.
UPDATE work.work_items
SET cancel_requested_at = coalesce(cancel_requested_at, now())
WHERE work_item_id = ANY($1::uuid[]) AND status IN ('claimed', 'running')

-- name: close_superseded_threads
-- Threads whose work was superseded: cancellation asked for, and closed when nothing is live.
UPDATE work.threads t
SET cancel_requested_at = coalesce(t.cancel_requested_at, now()),
    cancel_reason = coalesce(t.cancel_reason, $2),
    status = CASE WHEN EXISTS (
                 SELECT 1 FROM work.work_items w
                 WHERE w.thread_id = t.thread_id
                   AND w.status IN ('queued', 'claimed', 'running', 'failed', 'parked'))
             THEN t.status ELSE 'canceled' END,
    closed_at = CASE WHEN EXISTS (
                    SELECT 1 FROM work.work_items w
                    WHERE w.thread_id = t.thread_id
                      AND w.status IN ('queued', 'claimed', 'running', 'failed', 'parked'))
                THEN NULL ELSE now() END,
    updated_at = now()
WHERE t.thread_id = ANY($1::uuid[]) AND t.status IN ('open', 'running')
