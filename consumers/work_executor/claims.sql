-- Queries of consumers/work_executor/claims.py: the claim transaction (the ADR-0023 lease),
-- run under the scheduler's advisory lock so the counts it decides on (items in flight per
-- tenant and route, rate limiters, budgets) cannot change under it.

-- name: scheduler_lock
SELECT pg_advisory_xact_lock($1::int, 0)

-- name: fold_spend
-- The spend changes committed since the last claim enter the running totals the budgets are
-- read from (migration 0031); what commits after this is read from the changes themselves.
SELECT work.fold_spend_changes()

-- name: resume_parked
-- Parked items resume (queued, or failed = waiting for a retry when an attempt was made) when
-- the budget of the scope that parked them was changed or removed after they were parked, a
-- new period started, or a reservation of that scope whose call's outcome stayed unknown was
-- released at the horizon after they were parked (room came back; an item that still does not
-- fit parks again). (Changing a budget through the API or CLI resumes them at once, in its own
-- transaction.)
-- The releases are read once per statement: those since the earliest park (the partial index of
-- released reservations), into one object of each scope's latest release ('kind:id' -> time),
-- in which each parked item looks its scope up. (A search of the releases per parked item read
-- every release after its park, of any scope: 5,000 items x 5,000 releases, 25 million rows and
-- ~5.9 s per claim, under the scheduler's lock.)
WITH released AS MATERIALIZED (
    SELECT jsonb_object_agg(k.scope, k.latest) AS latest
    FROM (
        SELECT s.scope, max(x.released_unknown_at) AS latest
        FROM work.spend x
        CROSS JOIN LATERAL (VALUES ('org:' || x.org_id), ('project:' || x.project_id),
                                   ('thread:' || x.thread_id::text),
                                   ('thread:' || x.parent_thread_id::text),
                                   ('route:' || x.model)) AS s (scope)
        WHERE x.released_unknown_at > (SELECT min(p.parked_at) FROM work.work_items p
                                       WHERE p.status = 'parked')
          AND s.scope IS NOT NULL
        GROUP BY s.scope
    ) AS k
),
resumable AS (
    SELECT w.work_item_id
    FROM work.work_items w
    LEFT JOIN work.budget_scopes b
        ON b.scope_kind = w.park_scope_kind AND b.scope_id = w.park_scope_id
    WHERE w.status = 'parked'
      AND (b.scope_id IS NULL OR b.updated_at > w.parked_at
           OR work.period_start(b.period, now()) > w.parked_at
           OR ((SELECT r.latest FROM released r)
               ->> (w.park_scope_kind || ':' || w.park_scope_id))::timestamptz > w.parked_at)
    FOR UPDATE OF w SKIP LOCKED
)
UPDATE work.work_items w
SET status = CASE WHEN w.attempt > 0 THEN 'failed' ELSE 'queued' END, park_reason = NULL,
    parked_at = NULL, park_scope_kind = NULL, park_scope_id = NULL
FROM resumable r
WHERE w.work_item_id = r.work_item_id
RETURNING w.work_item_id

-- name: candidates
-- The tenants with waiting items (a skip scan of work_items_waiting: one index probe per
-- tenant, however many items each has) — of them the $2 with the fewest items leased, then
-- the oldest best rank (the order the round-robin serves them in: a claim takes at most $1
-- items, so tenants further down could not get one) — and each one's first $1 items due now
-- in rank order, with the upper bound of its prompt's UTF-8 length it was enqueued with (the
-- spend reserved is computed from it) — or, for an item enqueued before items carried one, the
-- UTF-8 lengths its story prompt is rendered from.
WITH RECURSIVE tenants AS (
    (SELECT tenant FROM work.work_items WHERE status IN ('queued', 'failed')
     ORDER BY tenant LIMIT 1)
    UNION ALL
    SELECT (SELECT w.tenant FROM work.work_items w
            WHERE w.status IN ('queued', 'failed') AND w.tenant > t.tenant
            ORDER BY w.tenant LIMIT 1)
    FROM tenants t
    WHERE t.tenant IS NOT NULL
), busy AS (
    SELECT tenant, count(*) AS leased
    FROM work.work_items
    WHERE status IN ('claimed', 'running')
    GROUP BY tenant
), served AS (
    SELECT t.tenant
    FROM tenants t
    LEFT JOIN busy b ON b.tenant = t.tenant
    CROSS JOIN LATERAL (
        SELECT w.rank_at FROM work.work_items w
        WHERE w.tenant = t.tenant AND w.status IN ('queued', 'failed')
        ORDER BY w.rank_at LIMIT 1
    ) best
    WHERE t.tenant IS NOT NULL
    ORDER BY coalesce(b.leased, 0), best.rank_at, t.tenant
    LIMIT $2
)
SELECT c.work_item_id, c.tenant, c.org_id, c.function_key, c.rank_at, c.attempt, c.prompt_bytes,
       c.project_id, c.thread_id, th.parent_thread_id,
       octet_length(coalesce(c.input ->> 'epic_id', ''))::integer AS epic_id_bytes,
       octet_length(coalesce(d.content #>> ARRAY['epics', c.input ->> 'epic_id', 'title'], ''))::integer
           AS title_bytes,
       octet_length(coalesce(d.content ->> 'title', ''))::integer AS backlog_title_bytes,
       octet_length(coalesce(d.content #>> ARRAY['epics', c.input ->> 'epic_id', 'description'],
                             ''))::integer AS description_bytes
FROM served t
CROSS JOIN LATERAL (
    SELECT w.work_item_id, w.tenant, w.org_id, w.function_key, w.rank_at, w.attempt, w.input,
           w.prompt_bytes, w.project_id, w.thread_id
    FROM work.work_items w
    WHERE w.tenant = t.tenant AND w.status IN ('queued', 'failed') AND w.not_before <= now()
    ORDER BY w.rank_at, w.work_item_id
    LIMIT $1
) c
JOIN work.threads th ON th.thread_id = c.thread_id
LEFT JOIN work.documents d
    ON c.prompt_bytes IS NULL AND d.document_id = c.input ->> 'document_id'

-- name: candidates_of
-- The candidates among these items only (those still waiting and due), as above.
SELECT w.work_item_id, w.tenant, w.org_id, w.function_key, w.rank_at, w.attempt, w.prompt_bytes,
       w.project_id, w.thread_id, th.parent_thread_id,
       octet_length(coalesce(w.input ->> 'epic_id', ''))::integer AS epic_id_bytes,
       octet_length(coalesce(d.content #>> ARRAY['epics', w.input ->> 'epic_id', 'title'], ''))::integer
           AS title_bytes,
       octet_length(coalesce(d.content ->> 'title', ''))::integer AS backlog_title_bytes,
       octet_length(coalesce(d.content #>> ARRAY['epics', w.input ->> 'epic_id', 'description'],
                             ''))::integer AS description_bytes
FROM work.work_items w
JOIN work.threads th ON th.thread_id = w.thread_id
LEFT JOIN work.documents d
    ON w.prompt_bytes IS NULL AND d.document_id = w.input ->> 'document_id'
WHERE w.work_item_id = ANY($1::uuid[]) AND w.status IN ('queued', 'failed')
  AND w.not_before <= now()

-- name: leased
-- Every leased item's tenant and route, and whether its call is (about to be) in flight: a
-- running item whose current attempt has its response recorded is only being concluded.
SELECT w.tenant, w.route,
       NOT (w.status = 'running' AND EXISTS (
           SELECT 1 FROM work.ledger_entries e
           WHERE e.work_item_id = w.work_item_id AND e.attempt = w.attempt
             AND e.entry_type = 'response')) AS calling
FROM work.work_items w
WHERE w.status IN ('claimed', 'running')

-- name: route_states
SELECT model, request_tat, token_tat, paused_until, reserve_ratio,
       suspended_at IS NOT NULL AS suspended
FROM work.provider_routes
WHERE model = ANY($1::text[])

-- name: claim
-- The lease of each picked item (still waiting: a cancellation or another claim may have
-- taken it meanwhile), its route, its thread started, and the reservation of its next
-- attempt's spend — an upper bound of the call's tokens and cost — all in this transaction.
WITH picked AS (
    SELECT *
    FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::numeric[], $5::numeric[],
                $6::numeric[], $9::numeric[])
        AS p (work_item_id, model, tokens, cost, prompt_price, completion_price, ratio)
), waiting AS (
    -- Row locks in id order, as every writer of several items takes them (no deadlock with a
    -- cancellation locking the same items).
    SELECT w.work_item_id
    FROM work.work_items w
    JOIN picked p ON p.work_item_id = w.work_item_id
    WHERE w.status IN ('queued', 'failed') AND w.cancel_requested_at IS NULL
    ORDER BY w.work_item_id
    FOR UPDATE OF w
), claimed AS (
    UPDATE work.work_items w
    SET status = 'claimed', lease_token = $7, leased_at = now(), leased_by = $8,
        route = p.model
    FROM picked p, waiting x
    WHERE w.work_item_id = p.work_item_id AND x.work_item_id = w.work_item_id
    RETURNING w.work_item_id, w.thread_id, w.attempt, w.org_id, w.function_key, w.project_id
), started AS (
    UPDATE work.threads t
    SET status = 'running', updated_at = now()
    WHERE t.thread_id IN (SELECT thread_id FROM claimed) AND t.status = 'open'
), reserved AS (
    INSERT INTO work.spend AS s (work_item_id, attempt, org_id, model, function_key, state,
                                 reserved_tokens, reserved_cost, prompt_price, completion_price,
                                 reserve_ratio, project_id, thread_id, parent_thread_id)
    SELECT c.work_item_id, c.attempt + 1, c.org_id, p.model, c.function_key, 'reserved',
           p.tokens, p.cost, p.prompt_price, p.completion_price, p.ratio, c.project_id,
           c.thread_id, t.parent_thread_id
    FROM claimed c
    JOIN picked p ON p.work_item_id = c.work_item_id
    JOIN work.threads t ON t.thread_id = c.thread_id
    ON CONFLICT (work_item_id, attempt) DO UPDATE
        SET state = 'reserved', model = excluded.model, reserved_tokens = excluded.reserved_tokens,
            reserved_cost = excluded.reserved_cost, prompt_price = excluded.prompt_price,
            completion_price = excluded.completion_price, reserve_ratio = excluded.reserve_ratio,
            project_id = excluded.project_id, thread_id = excluded.thread_id,
            parent_thread_id = excluded.parent_thread_id, reserved_at = now()
        WHERE s.state = 'released'
)
SELECT work_item_id FROM claimed ORDER BY work_item_id

-- name: save_routes
INSERT INTO work.provider_routes AS r (model, request_tat, token_tat)
SELECT m.model, coalesce(m.request_tat, '-infinity'), coalesce(m.token_tat, '-infinity')
FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[]) AS m (model, request_tat, token_tat)
ON CONFLICT (model) DO UPDATE
    SET request_tat = excluded.request_tat, token_tat = excluded.token_tat, updated_at = now()

-- name: park
-- Waiting items park, naming the scope whose budget cannot take another call this period: for
-- an org, a project or a thread every waiting item of the scope, for a model route the items
-- refused ($1 item ids, $2 scope kinds, $3 scope ids, $4 reasons: one row per refused item).
WITH refused AS (
    SELECT *
    FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[])
        AS r (work_item_id, kind, scope_id, reason)
), scopes AS (
    SELECT DISTINCT ON (kind, scope_id) kind, scope_id, reason,
           CASE WHEN kind = 'thread' THEN scope_id::uuid END AS thread_id
    FROM refused
    WHERE kind <> 'route'
    ORDER BY kind, scope_id
), targets AS (
    SELECT work_item_id, kind, scope_id, reason FROM refused
    UNION ALL
    SELECT w.work_item_id, p.kind, p.scope_id, p.reason
    FROM scopes p JOIN work.work_items w ON p.kind = 'org' AND w.org_id = p.scope_id
    WHERE w.status IN ('queued', 'failed')
    UNION ALL
    SELECT w.work_item_id, p.kind, p.scope_id, p.reason
    FROM scopes p JOIN work.work_items w ON p.kind = 'project' AND w.project_id = p.scope_id
    WHERE w.status IN ('queued', 'failed')
    UNION ALL
    SELECT w.work_item_id, p.kind, p.scope_id, p.reason
    FROM scopes p JOIN work.work_items w ON p.kind = 'thread' AND w.thread_id = p.thread_id
    WHERE w.status IN ('queued', 'failed')
    UNION ALL
    SELECT w.work_item_id, p.kind, p.scope_id, p.reason
    FROM scopes p JOIN work.threads t ON p.kind = 'thread' AND t.parent_thread_id = p.thread_id
    JOIN work.work_items w ON w.thread_id = t.thread_id
    WHERE w.status IN ('queued', 'failed')
), chosen AS (
    -- an item in several exhausted scopes is parked by the first (outermost) of them
    SELECT DISTINCT ON (work_item_id) work_item_id, kind, scope_id, reason
    FROM targets
    ORDER BY work_item_id, array_position(ARRAY['org', 'project', 'thread', 'route'], kind)
), waiting AS (
    SELECT w.work_item_id
    FROM work.work_items w
    WHERE w.work_item_id IN (SELECT work_item_id FROM chosen)
      AND w.status IN ('queued', 'failed') AND w.cancel_requested_at IS NULL
    ORDER BY w.work_item_id
    FOR UPDATE OF w SKIP LOCKED
)
UPDATE work.work_items w
SET status = 'parked', park_reason = c.reason, parked_at = now(), park_scope_kind = c.kind,
    park_scope_id = c.scope_id
FROM waiting x
JOIN chosen c ON c.work_item_id = x.work_item_id
WHERE w.work_item_id = x.work_item_id
RETURNING w.work_item_id, w.park_scope_kind

-- name: now
-- The transaction's clock: every executor's rate limiters and budgets run on the database's.
SELECT now()
