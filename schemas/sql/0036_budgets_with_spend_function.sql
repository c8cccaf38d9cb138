-- 0036 each budget with what its scope spent in the current period, in one function for both of
-- its reads: from the running totals (0031: a few rows per scope, whatever the period's volume)
-- and, `from_ledger`, summed from the period's spend rows themselves (the audit of the totals,
-- not for a hot path). One definition of which budgets, their period and their output columns,
-- so the two reads stay comparable row by row. No data changes.
--
-- What a spend row counts (0014, 0022, 0027): settled usage, else the reservation (a reservation
-- whose call's outcome is unknown counts in full), nothing once released; apart, the
-- reservations outstanding, those of unknown outcome with their tokens, and what providers
-- billed beyond reservations (overruns). A scope's spend is that of the attempts reserved in it:
-- an org's, a project's, a thread's (its own calls and its child threads'), a model route's.
--
-- The function is plain SQL, STABLE, not STRICT, without SET: PostgreSQL inlines it into the
-- calling query, where `from_ledger` is a constant, so the plan of each read holds only its own
-- branches (the running-totals read never reads work.spend).

CREATE FUNCTION work.budgets_with_spend(kinds text[], ids text[], from_ledger boolean)
RETURNS TABLE (
    scope_kind text, scope_id text, period text, token_limit bigint, cost_limit numeric,
    updated_at timestamptz, updated_by text, period_start timestamptz, tokens bigint,
    cost numeric, outstanding integer, unknown integer, unknown_tokens bigint,
    overrun_tokens bigint, parked integer)
LANGUAGE sql STABLE AS $fn$
WITH b AS (
    SELECT b.*, work.period_start(b.period, now()) AS period_start,
           CASE b.period WHEN 'hour' THEN 'hour' WHEN 'total' THEN 'total' ELSE 'day' END
               AS bucket,
           CASE WHEN b.scope_kind = 'thread' THEN b.scope_id::uuid END AS thread_id
    FROM work.budget_scopes b
    WHERE kinds IS NULL
       OR (b.scope_kind, b.scope_id) IN (SELECT * FROM unnest(kinds, ids))
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

-- Roles: every reader of budgets (it runs with the caller's rights, on what they read already).
REVOKE ALL ON FUNCTION work.budgets_with_spend(text[], text[], boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION work.budgets_with_spend(text[], text[], boolean)
    TO spectral_operator, spectral_executor, spectral_producer;
