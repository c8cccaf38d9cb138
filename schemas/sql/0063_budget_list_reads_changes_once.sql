-- The list of every budget reads the spend changes not folded yet once, not once per budget.
--
-- work.budgets_with_spend (0061 budgets_found_by_key) added the changes not folded into the
-- running totals with one join whose condition was a CASE over the budget's scope kind
-- (`CASE b.scope_kind WHEN 'org' THEN c.org_id = b.scope_id ... END`): no hash or merge join
-- can use such a condition, so the changes were read once per budget. Changes are folded at the
-- start of every claim, so few wait in normal running; they pile up while every executor is
-- down, which is when operators open the Budgets page: 5,000 budgets x 1,000 changes cost
-- 0.8-0.94 s per list, 1,000 + 1,000 budgets x 1,000 changes read over 2,000,000 rows
-- (tests/integration/work/test_unfolded_spend_plans.py). Now one arm per scope kind joins on
-- equality, as the ledger's arms already did; a thread's own changes and its children's are
-- two arms, the second leaving out a change of the thread itself, so a change counts once for
-- a thread as `b.thread_id IN (c.thread_id, c.parent_thread_id)` counted it. The rest of the
-- function is 0061's, word for word. No data changes; the function keeps its parameters,
-- result and privileges.

CREATE OR REPLACE FUNCTION work.budgets_with_spend(kinds text[], ids text[], from_ledger boolean)
RETURNS TABLE (
    scope_kind text, scope_id text, period text, token_limit bigint, cost_limit numeric,
    updated_at timestamptz, updated_by text, period_start timestamptz, tokens bigint,
    cost numeric, outstanding integer, unknown integer, unknown_tokens bigint,
    overrun_tokens bigint, parked integer)
LANGUAGE sql STABLE AS $fn$
WITH asked AS (
    -- every budget, or each scope asked for found by its key (an org's in work.budgets, the
    -- others' in work.scope_budgets: the two sides of work.budget_scopes), each scope once
    SELECT v.*
    FROM work.budget_scopes v
    WHERE kinds IS NULL
    UNION ALL
    SELECT v.*
    FROM (SELECT DISTINCT k.kind, k.id FROM unnest(kinds, ids) AS k (kind, id)) AS k
    CROSS JOIN LATERAL (
        SELECT 'org'::text AS scope_kind, g.org_id AS scope_id, g.period, g.token_limit,
               g.cost_limit, g.updated_at, g.updated_by
        FROM work.budgets g
        WHERE k.kind = 'org' AND g.org_id = k.id
        UNION ALL
        SELECT s.scope_kind, s.scope_id, s.period, s.token_limit, s.cost_limit, s.updated_at,
               s.updated_by
        FROM work.scope_budgets s
        WHERE s.scope_kind = k.kind AND s.scope_id = k.id
    ) AS v
    WHERE kinds IS NOT NULL
), b AS (
    SELECT b.*, work.period_start(b.period, now()) AS period_start,
           CASE b.period WHEN 'hour' THEN 'hour' WHEN 'total' THEN 'total' ELSE 'day' END
               AS bucket,
           CASE WHEN b.scope_kind = 'thread' THEN b.scope_id::uuid END AS thread_id
    FROM asked b
), ledger AS (
    SELECT b.scope_kind, b.scope_id, x.*
    FROM b JOIN work.spend x
      ON b.scope_kind = 'org' AND x.org_id = b.scope_id AND x.reserved_at >= b.period_start
    WHERE from_ledger
    UNION ALL
    SELECT b.scope_kind, b.scope_id, x.*
    FROM b JOIN work.spend x
      ON b.scope_kind = 'project' AND x.project_id = b.scope_id
     AND x.reserved_at >= b.period_start
    WHERE from_ledger
    UNION ALL
    SELECT b.scope_kind, b.scope_id, x.*
    FROM b JOIN work.spend x
      ON b.scope_kind = 'thread' AND x.thread_id = b.thread_id AND x.reserved_at >= b.period_start
    WHERE from_ledger
    UNION ALL
    SELECT b.scope_kind, b.scope_id, x.*
    FROM b JOIN work.spend x
      ON b.scope_kind = 'thread' AND x.parent_thread_id = b.thread_id
     AND x.reserved_at >= b.period_start
    WHERE from_ledger
    UNION ALL
    SELECT b.scope_kind, b.scope_id, x.*
    FROM b JOIN work.spend x
      ON b.scope_kind = 'route' AND x.model = b.scope_id AND x.reserved_at >= b.period_start
    WHERE from_ledger
), x AS (
    -- the running totals: the buckets of the period, and the changes not folded yet
    SELECT b.scope_kind, b.scope_id, t.tokens, t.cost, t.outstanding, t.unknown,
           t.unknown_tokens, t.overrun_tokens
    FROM b JOIN work.spend_totals t
      ON t.scope_kind = b.scope_kind AND t.scope_id = b.scope_id AND t.bucket = b.bucket
     AND t.bucket_start >= b.period_start
    WHERE NOT from_ledger
    UNION ALL
    SELECT b.scope_kind, b.scope_id, c.tokens, c.cost, c.outstanding, c.unknown,
           c.unknown_tokens, c.overrun_tokens
    FROM b JOIN work.spend_changes c
      ON b.scope_kind = 'org' AND c.org_id = b.scope_id AND c.reserved_hour >= b.period_start
    WHERE NOT from_ledger
    UNION ALL
    SELECT b.scope_kind, b.scope_id, c.tokens, c.cost, c.outstanding, c.unknown,
           c.unknown_tokens, c.overrun_tokens
    FROM b JOIN work.spend_changes c
      ON b.scope_kind = 'project' AND c.project_id = b.scope_id
     AND c.reserved_hour >= b.period_start
    WHERE NOT from_ledger
    UNION ALL
    SELECT b.scope_kind, b.scope_id, c.tokens, c.cost, c.outstanding, c.unknown,
           c.unknown_tokens, c.overrun_tokens
    FROM b JOIN work.spend_changes c
      ON b.scope_kind = 'thread' AND c.thread_id = b.thread_id
     AND c.reserved_hour >= b.period_start
    WHERE NOT from_ledger
    UNION ALL
    -- a change of a child thread counts for its parent too (once: not when it is the parent's)
    SELECT b.scope_kind, b.scope_id, c.tokens, c.cost, c.outstanding, c.unknown,
           c.unknown_tokens, c.overrun_tokens
    FROM b JOIN work.spend_changes c
      ON b.scope_kind = 'thread' AND c.parent_thread_id = b.thread_id
     AND c.thread_id IS DISTINCT FROM b.thread_id AND c.reserved_hour >= b.period_start
    WHERE NOT from_ledger
    UNION ALL
    SELECT b.scope_kind, b.scope_id, c.tokens, c.cost, c.outstanding, c.unknown,
           c.unknown_tokens, c.overrun_tokens
    FROM b JOIN work.spend_changes c
      ON b.scope_kind NOT IN ('org', 'project', 'thread') AND c.model = b.scope_id
     AND c.reserved_hour >= b.period_start
    WHERE NOT from_ledger
    UNION ALL
    -- the ledger: what the period's spend rows count, summed
    SELECT l.scope_kind, l.scope_id,
           sum(CASE l.state WHEN 'settled' THEN l.tokens WHEN 'released' THEN 0
                            ELSE l.reserved_tokens END),
           sum(CASE l.state WHEN 'settled' THEN l.cost WHEN 'released' THEN 0
                            ELSE l.reserved_cost END),
           count(*) FILTER (WHERE l.state = 'reserved'),
           count(*) FILTER (WHERE l.state = 'unknown'),
           sum(l.reserved_tokens) FILTER (WHERE l.state = 'unknown'),
           sum(l.overrun_tokens)
    FROM ledger l
    GROUP BY l.scope_kind, l.scope_id
), s AS (
    SELECT x.scope_kind, x.scope_id, sum(x.tokens) AS tokens, sum(x.cost) AS cost,
           sum(x.outstanding) AS outstanding, sum(x.unknown) AS unknown,
           sum(x.unknown_tokens) AS unknown_tokens, sum(x.overrun_tokens) AS overrun_tokens
    FROM x
    GROUP BY x.scope_kind, x.scope_id
)
SELECT b.scope_kind::text, b.scope_id::text, b.period::text, b.token_limit::bigint,
       b.cost_limit::numeric, b.updated_at::timestamptz, b.updated_by::text,
       b.period_start::timestamptz,
       coalesce(s.tokens, 0)::bigint, coalesce(s.cost, 0)::numeric,
       coalesce(s.outstanding, 0)::integer, coalesce(s.unknown, 0)::integer,
       coalesce(s.unknown_tokens, 0)::bigint, coalesce(s.overrun_tokens, 0)::bigint,
       (SELECT count(*) FROM work.work_items w
        WHERE w.status = 'parked' AND w.park_scope_kind = b.scope_kind
          AND w.park_scope_id = b.scope_id)::integer
FROM b
LEFT JOIN s ON s.scope_kind = b.scope_kind AND s.scope_id = b.scope_id
$fn$;
