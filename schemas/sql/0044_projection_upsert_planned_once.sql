-- The projection's upsert keeps one plan per session, made of index probes only.
--
-- The rule-candidates projection's upsert (consumers/rule_candidates/queries.sql
-- upsert_snapshots) was a prepared statement of the engine's session: after five custom plans the
-- plan cache kept a generic one, made once, while the projection held the few clusters of the
-- first batches. For so few rows the cheapest way to the stored snapshots of a batch's clusters
-- (its prior CTE) is a hash join over a sequential scan of the whole projection, and that plan
-- stayed as the projection grew, until new statistics happened to make the session plan again:
-- 400 batches of 20 records read 561,333 rows of a projection of 2,218 clusters (one scan per
-- batch); with hundreds of thousands of clusters every batch would read them all. The statement
-- is now the body of a PL/pgSQL function, unchanged, whose plan is made as the dedup claim's is
-- (0041 claim_planned_once): generic, with sequential and bitmap scans disabled, so each
-- cluster of a batch is found by the primary key whatever the planner knows of the projection's
-- size, and jit off (a disabled path is costed at 10^10). Its parameter, its result and what it
-- writes are unchanged; it runs with the caller's privileges (the projection role's column
-- privileges apply).

CREATE FUNCTION platform.upsert_rule_candidate_snapshots(
    snapshots platform.rule_candidate_snapshot[]
)
RETURNS TABLE (
    cluster_id text,
    inserted boolean,
    resurfaced boolean,
    prior_ordered_at timestamptz,
    prior_last_observed_at timestamptz,
    prior_failure_count bigint,
    prior_snapshot_hash text
)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH incoming AS (
        SELECT *
        FROM unnest(snapshots)
    ),
    prior AS (
        SELECT p.cluster_id, p.ordered_at, p.last_observed_at, p.failure_count, p.snapshot_hash,
               p.last_signaled_at
        FROM platform.rule_candidates_pending AS p
        WHERE p.cluster_id IN (SELECT cluster_id FROM incoming)
    ),
    applied AS (
        INSERT INTO platform.rule_candidates_pending AS t
            (cluster_id, snapshot_hash, rule_id, workspace_id, severity, failure_count,
             first_observed_at, last_observed_at, evidence_bundle, suggested_rule_stub, ordered_at)
        SELECT cluster_id, snapshot_hash, rule_id, workspace_id, severity, failure_count,
               first_observed_at, last_observed_at,
               CASE WHEN get_byte(evidence, 0) = 91  -- '[': the bundle itself
                    THEN convert_from(evidence, 'UTF8')::jsonb
                    ELSE convert_from(evidence, 'UTF8')::jsonb -> 'payload' -> 'evidence_bundle'
               END,
               suggested_rule_stub, ordered_at
        FROM incoming
        ON CONFLICT (cluster_id) DO UPDATE SET
            snapshot_hash       = excluded.snapshot_hash,
            rule_id             = excluded.rule_id,
            workspace_id        = excluded.workspace_id,
            severity            = excluded.severity,
            failure_count       = excluded.failure_count,
            first_observed_at   = excluded.first_observed_at,
            last_observed_at    = excluded.last_observed_at,
            evidence_bundle     = excluded.evidence_bundle,
            suggested_rule_stub = excluded.suggested_rule_stub,
            ordered_at          = excluded.ordered_at,
            last_signaled_at    = now(),
            resurfaced_at       = CASE
                WHEN t.status IN ('dismissed', 'resolved')
                     AND t.snapshot_hash IS DISTINCT FROM excluded.snapshot_hash
                THEN now()
                ELSE t.resurfaced_at
            END
        WHERE (excluded.ordered_at, excluded.last_observed_at, excluded.failure_count,
               excluded.snapshot_hash COLLATE "C")
            > (t.ordered_at, t.last_observed_at, t.failure_count, t.snapshot_hash COLLATE "C")
        RETURNING t.cluster_id,
                  t.failure_count,
                  t.xmax = 0 AS inserted,
                  t.xmax <> 0 AND t.resurfaced_at IS NOT DISTINCT FROM now() AS resurfaced
    ),
    signalled AS (
        INSERT INTO platform.cluster_signal_hours (hour, cluster_id, failure_count)
        SELECT date_trunc('hour', now()), a.cluster_id, a.failure_count
        FROM applied AS a
        LEFT JOIN prior AS p ON p.cluster_id = a.cluster_id
        WHERE p.last_signaled_at IS NULL
           OR date_trunc('hour', p.last_signaled_at) <> date_trunc('hour', now())
        ON CONFLICT DO NOTHING
    )
    SELECT a.cluster_id::text AS cluster_id, a.inserted, a.resurfaced,
           p.ordered_at AS prior_ordered_at,
           p.last_observed_at AS prior_last_observed_at,
           p.failure_count AS prior_failure_count,
           p.snapshot_hash AS prior_snapshot_hash
    FROM applied AS a
    LEFT JOIN prior AS p ON p.cluster_id = a.cluster_id;
END
$fn$;

REVOKE ALL ON FUNCTION platform.upsert_rule_candidate_snapshots(platform.rule_candidate_snapshot[])
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    platform.upsert_rule_candidate_snapshots(platform.rule_candidate_snapshot[])
    TO spectral_projector;
