-- 0035 the fold (0031) drops the buckets no period reads any more through an index range of
-- exactly those rows: the hour buckets older than two hours and the day buckets older than 32
-- days each have a partial index, and each is deleted with a constant bound. (0031's single
-- condition, whose bound depended on the bucket, could not use its index: every claim scanned
-- every total — a 'total' row per thread ever budgeted or not.)
DROP INDEX work.spend_totals_by_age;
CREATE INDEX spend_totals_hours ON work.spend_totals (bucket_start) WHERE bucket = 'hour';
CREATE INDEX spend_totals_days ON work.spend_totals (bucket_start) WHERE bucket = 'day';

CREATE OR REPLACE FUNCTION work.fold_spend_changes() RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    DELETE FROM work.spend_totals
    WHERE bucket = 'hour' AND bucket_start < now() - interval '2 hours';
    DELETE FROM work.spend_totals
    WHERE bucket = 'day' AND bucket_start < now() - interval '32 days';
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
GRANT EXECUTE ON FUNCTION work.fold_spend_changes() TO spectral_executor;
