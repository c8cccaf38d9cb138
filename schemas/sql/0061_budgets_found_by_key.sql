-- Each budget's spend, for a list of scopes, finds each scope's budget by its key.
--
-- work.budgets_with_spend (0036 budgets_with_spend_function) chose its budgets with
-- `(scope_kind, scope_id) IN (SELECT * FROM unnest(kinds, ids))` over the view
-- work.budget_scopes (work.budgets UNION ALL work.scope_budgets): the planner tested every row of
-- both tables against the list instead of looking each scope up. Every claim of the work
-- executor asks for its candidates' scopes this way, under the scheduler's lock, and thread
-- budgets stay after their thread ends until an operator removes them: 20,000 thread budgets,
-- 20,023 rows read for 5 scopes, 0.055-0.12 s a claim (200,000: 1.0-1.3 s). Now each scope asked
-- for (each once, as the IN counted it) is found by the primary key of the table that holds its
-- kind; with no list (kinds NULL) every budget is read, as before. The rest of the function —
-- its output, its two reads (running totals, ledger) and its inlining — is 0036's, word for word.
-- No data changes; the function keeps its parameters, result and privileges.

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
      ON c.reserved_hour >= b.period_start
     AND CASE b.scope_kind
             WHEN 'org' THEN c.org_id = b.scope_id
             WHEN 'project' THEN c.project_id = b.scope_id
             WHEN 'thread' THEN b.thread_id IN (c.thread_id, c.parent_thread_id)
             ELSE c.model = b.scope_id
         END
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
