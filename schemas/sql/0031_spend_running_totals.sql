-- 0031 running totals of spend per scope and period: a claim reads what each budgeted scope
-- spent in its period from a few total rows instead of summing every spend row of the period.
--
-- What a spend row counts is unchanged (0014, 0022, 0027): tokens and cost = the settled usage,
-- else the reservation, nothing once released; outstanding = reserved and not settled; unknown
-- = of unknown outcome, with its reserved tokens; overrun_tokens = billed beyond the
-- reservation. A row counts in its org, project, thread, parent thread and model route, in the
-- period its reservation was made in.
--
-- work.spend_changes  what changes of spend rows changed, written by triggers on work.spend in
--                     the very transaction that reserves, settles, marks or releases (one row
--                     per statement and scope set and hour, the sums of the rows it changed:
--                     new counts minus old ones); taken out by the fold, so it holds only what
--                     changed since the last claim.
-- work.spend_totals   the folded sums, per scope (kind, id) and bucket: the 'hour' and the
--                     'day' (UTC) the reservations were made in, and 'total'. Every period
--                     start is an hour boundary, and every period other than an hour or 'total'
--                     is whole days, so a scope's spend in its current period is the sum of its
--                     buckets of its period's kind from the period start on (1 row for an hour,
--                     a day or 'total', at most 7 for a week, 31 for a month) plus its changes
--                     not folded yet from the period start on.
-- work.fold_spend_changes()  moves the changes into the totals (one statement: what it deletes
--                     is exactly what it adds) and drops buckets no period reads any more;
--                     the claim runs it under the scheduler's lock.
--
-- A reader sees the totals and the changes in one snapshot: each change is in exactly one of
-- them (a change commits with its spend row; the fold moves it atomically), so totals plus
-- changes always equal the sum over the spend rows (producers/work/domain/budgets.py proves it
-- against work.spend, and a property test holds it under concurrent claims, settles and
-- releases).

LOCK TABLE work.spend IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE work.spend_changes (
    reserved_hour    timestamptz    NOT NULL,
    org_id           text           NULL,
    project_id       text           NULL,
    thread_id        uuid           NULL,
    parent_thread_id uuid           NULL,
    model            text           NULL,
    tokens           bigint         NOT NULL,
    cost             numeric        NOT NULL,
    outstanding      bigint         NOT NULL,
    unknown          bigint         NOT NULL,
    unknown_tokens   bigint         NOT NULL,
    overrun_tokens   bigint         NOT NULL
);

CREATE TABLE work.spend_totals (
    scope_kind     text        NOT NULL CHECK (scope_kind IN ('org', 'project', 'thread', 'route')),
    scope_id       text        NOT NULL,
    bucket         text        NOT NULL CHECK (bucket IN ('hour', 'day', 'total')),
    bucket_start   timestamptz NOT NULL,
    tokens         bigint      NOT NULL,
    cost           numeric     NOT NULL,
    outstanding    bigint      NOT NULL,
    unknown        bigint      NOT NULL,
    unknown_tokens bigint      NOT NULL,
    overrun_tokens bigint      NOT NULL,
    PRIMARY KEY (scope_kind, scope_id, bucket, bucket_start)
);
CREATE INDEX spend_totals_by_age ON work.spend_totals (bucket_start) WHERE bucket <> 'total';

-- What one spend row counts, by its state (as budgets count it).
CREATE FUNCTION work.spend_counts(
    state text, settled_tokens bigint, settled_cost numeric, reserved_tokens bigint,
    reserved_cost numeric, overrun bigint, sign integer,
    OUT tokens bigint, OUT cost numeric, OUT outstanding bigint, OUT unknown bigint,
    OUT unknown_tokens bigint, OUT overrun_tokens bigint)
LANGUAGE sql IMMUTABLE AS $fn$
    SELECT sign * CASE state WHEN 'settled' THEN settled_tokens WHEN 'released' THEN 0
                             ELSE reserved_tokens END,
           sign * CASE state WHEN 'settled' THEN settled_cost WHEN 'released' THEN 0
                             ELSE reserved_cost END,
           (sign * (state = 'reserved')::integer)::bigint,
           (sign * (state = 'unknown')::integer)::bigint,
           sign * CASE WHEN state = 'unknown' THEN reserved_tokens ELSE 0 END,
           sign * coalesce(overrun, 0)
$fn$;

-- The triggers: one per event (transition tables), each writing the statement's changes summed
-- per scope set and hour; a statement that changes nothing counted (a re-issue counted on its
-- row, say) writes nothing.
CREATE FUNCTION work.spend_changed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO work.spend_changes
        SELECT date_trunc('hour', r.reserved_at, 'UTC'), r.org_id, r.project_id, r.thread_id,
               r.parent_thread_id, r.model, sum(c.tokens), sum(c.cost), sum(c.outstanding),
               sum(c.unknown), sum(c.unknown_tokens), sum(c.overrun_tokens)
        FROM new_rows r
        CROSS JOIN LATERAL work.spend_counts(r.state, r.tokens, r.cost, r.reserved_tokens,
                                             r.reserved_cost, r.overrun_tokens, 1) c
        GROUP BY 1, 2, 3, 4, 5, 6
        HAVING sum(c.tokens) <> 0 OR sum(c.cost) <> 0 OR sum(c.outstanding) <> 0
            OR sum(c.unknown) <> 0 OR sum(c.unknown_tokens) <> 0 OR sum(c.overrun_tokens) <> 0;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO work.spend_changes
        SELECT date_trunc('hour', r.reserved_at, 'UTC'), r.org_id, r.project_id, r.thread_id,
               r.parent_thread_id, r.model, sum(c.tokens), sum(c.cost), sum(c.outstanding),
               sum(c.unknown), sum(c.unknown_tokens), sum(c.overrun_tokens)
        FROM (SELECT *, 1 AS sign FROM new_rows UNION ALL SELECT *, -1 FROM old_rows) r
        CROSS JOIN LATERAL work.spend_counts(r.state, r.tokens, r.cost, r.reserved_tokens,
                                             r.reserved_cost, r.overrun_tokens, r.sign) c
        GROUP BY 1, 2, 3, 4, 5, 6
        HAVING sum(c.tokens) <> 0 OR sum(c.cost) <> 0 OR sum(c.outstanding) <> 0
            OR sum(c.unknown) <> 0 OR sum(c.unknown_tokens) <> 0 OR sum(c.overrun_tokens) <> 0;
    ELSE
        INSERT INTO work.spend_changes
        SELECT date_trunc('hour', r.reserved_at, 'UTC'), r.org_id, r.project_id, r.thread_id,
               r.parent_thread_id, r.model, sum(c.tokens), sum(c.cost), sum(c.outstanding),
               sum(c.unknown), sum(c.unknown_tokens), sum(c.overrun_tokens)
        FROM old_rows r
        CROSS JOIN LATERAL work.spend_counts(r.state, r.tokens, r.cost, r.reserved_tokens,
                                             r.reserved_cost, r.overrun_tokens, -1) c
        GROUP BY 1, 2, 3, 4, 5, 6
        HAVING sum(c.tokens) <> 0 OR sum(c.cost) <> 0 OR sum(c.outstanding) <> 0
            OR sum(c.unknown) <> 0 OR sum(c.unknown_tokens) <> 0 OR sum(c.overrun_tokens) <> 0;
    END IF;
    RETURN NULL;
END
$fn$;
REVOKE ALL ON FUNCTION work.spend_changed() FROM PUBLIC;

CREATE TRIGGER spend_inserted AFTER INSERT ON work.spend
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION work.spend_changed();
CREATE TRIGGER spend_updated AFTER UPDATE ON work.spend
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION work.spend_changed();
CREATE TRIGGER spend_deleted AFTER DELETE ON work.spend
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION work.spend_changed();

-- The fold: every change visible now leaves spend_changes and enters the totals of each of its
-- scopes' buckets (upserted in key order: two folds at once cannot deadlock). First, buckets
-- that no period reads any more (an hour's after two hours, a day's after 32 days) are dropped:
-- a late change to one (a reservation settled or released long after it was made) re-creates
-- it, to be dropped again. Returns how many change rows it folded.
CREATE FUNCTION work.fold_spend_changes() RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    DELETE FROM work.spend_totals
    WHERE bucket <> 'total'
      AND bucket_start < now() - CASE bucket WHEN 'hour' THEN interval '2 hours'
                                             ELSE interval '32 days' END;
    WITH changes AS (
        DELETE FROM work.spend_changes RETURNING *
    ), scoped AS (
        SELECT s.kind, s.id, b.bucket, b.start, c.tokens, c.cost, c.outstanding, c.unknown,
               c.unknown_tokens, c.overrun_tokens
        FROM changes c
        CROSS JOIN LATERAL (VALUES ('org', c.org_id), ('project', c.project_id),
                                   ('thread', c.thread_id::text),
                                   ('thread', c.parent_thread_id::text),
                                   ('route', c.model)) AS s (kind, id)
        CROSS JOIN LATERAL (VALUES ('hour', c.reserved_hour),
                                   ('day', date_trunc('day', c.reserved_hour, 'UTC')),
                                   ('total', '-infinity'::timestamptz)) AS b (bucket, start)
        WHERE s.id IS NOT NULL
    ), folded AS (
        INSERT INTO work.spend_totals AS t (scope_kind, scope_id, bucket, bucket_start, tokens,
                                            cost, outstanding, unknown, unknown_tokens,
                                            overrun_tokens)
        SELECT kind, id, bucket, start, sum(tokens), sum(cost), sum(outstanding), sum(unknown),
               sum(unknown_tokens), sum(overrun_tokens)
        FROM scoped
        GROUP BY kind, id, bucket, start
        ORDER BY kind, id, bucket, start
        ON CONFLICT (scope_kind, scope_id, bucket, bucket_start) DO UPDATE
            SET tokens = t.tokens + excluded.tokens, cost = t.cost + excluded.cost,
                outstanding = t.outstanding + excluded.outstanding,
                unknown = t.unknown + excluded.unknown,
                unknown_tokens = t.unknown_tokens + excluded.unknown_tokens,
                overrun_tokens = t.overrun_tokens + excluded.overrun_tokens
    )
    SELECT count(*) FROM changes
$fn$;
REVOKE ALL ON FUNCTION work.fold_spend_changes() FROM PUBLIC;

-- The totals of the spend already recorded (the triggers take every change from here on).
INSERT INTO work.spend_changes
SELECT date_trunc('hour', r.reserved_at, 'UTC'), r.org_id, r.project_id, r.thread_id,
       r.parent_thread_id, r.model, sum(c.tokens), sum(c.cost), sum(c.outstanding),
       sum(c.unknown), sum(c.unknown_tokens), sum(c.overrun_tokens)
FROM work.spend r
CROSS JOIN LATERAL work.spend_counts(r.state, r.tokens, r.cost, r.reserved_tokens,
                                     r.reserved_cost, r.overrun_tokens, 1) c
GROUP BY 1, 2, 3, 4, 5, 6;
SELECT work.fold_spend_changes();

-- Roles: every reader of budgets reads both; only the claim folds (through the function).
GRANT SELECT ON work.spend_changes, work.spend_totals
    TO spectral_operator, spectral_executor, spectral_producer;
GRANT EXECUTE ON FUNCTION work.fold_spend_changes() TO spectral_executor;
