-- Statements of producers/clusters/retention.py (the failures' retention), run by `spectral
-- maintenance` as spectral_maintainer (migration retention).

-- name: clusters_after
-- The next clusters to look at, after the cursor ($1; NULL: from the start), that hold a failure
-- recorded before the cutoff (through failures_by_cluster).
SELECT c.cluster_id
FROM clusters.clusters AS c
WHERE ($1::uuid IS NULL OR c.cluster_id > $1::uuid)
  AND EXISTS (
      SELECT 1 FROM clusters.failures AS f
      WHERE f.cluster_id = c.cluster_id AND f.ingested_at < $2::timestamptz
  )
ORDER BY c.cluster_id
LIMIT $3

-- name: lock_clusters
-- Clusters no ingest or tick is busy with (those are left to the next pass).
SELECT cluster_id
FROM clusters.clusters
WHERE cluster_id = ANY($1::uuid[])
ORDER BY cluster_id
FOR UPDATE SKIP LOCKED

-- name: doomed
-- The failures of the locked clusters ($1) retention may prune as of the cutoff ($2): recorded
-- before it, observed outside the rate window ($3) before the cluster's latest failure (the
-- severity policy counts those), and not among the $4 most recent failures of the cluster (the
-- evidence may pick those one by one). A cluster with fewer failures keeps them all.
WITH bounds AS (
    SELECT l.cluster_id, latest.observed_at AS last_at, nth.observed_at AS nth_at,
           nth.failure_id AS nth_id
    FROM unnest($1::uuid[]) AS l (cluster_id)
    CROSS JOIN LATERAL (
        SELECT max(f.observed_at) AS observed_at
        FROM clusters.failures AS f
        WHERE f.cluster_id = l.cluster_id
    ) AS latest
    CROSS JOIN LATERAL (
        SELECT f.observed_at, f.failure_id
        FROM clusters.failures AS f
        WHERE f.cluster_id = l.cluster_id
        ORDER BY f.observed_at DESC, f.failure_id
        OFFSET $4::int - 1
        LIMIT 1
    ) AS nth
)
SELECT f.cluster_id, f.failure_id, f.observed_at, f.summary
FROM clusters.failures AS f
JOIN bounds AS b ON b.cluster_id = f.cluster_id
WHERE f.ingested_at < $2::timestamptz
  AND f.observed_at < b.last_at - $3::interval
  AND (f.observed_at < b.nth_at OR (f.observed_at = b.nth_at AND f.failure_id > b.nth_id))

-- name: prune
-- Delete the doomed failures ($1: their ids) and roll them up in the same transaction: per
-- cluster their count and earliest observation, per (cluster, summary) their count and the
-- most recent of them (observed_at descending, then failure_id: the evidence's order).
WITH gone AS (
    DELETE FROM clusters.failures AS f
    WHERE f.failure_id = ANY($1::text[])
    RETURNING f.cluster_id, f.failure_id, f.observed_at, f.summary
), per_cluster AS (
    UPDATE clusters.clusters AS c
    SET pruned_failures = c.pruned_failures + g.n,
        pruned_first_observed_at = least(c.pruned_first_observed_at, g.first_at)
    FROM (
        SELECT cluster_id, count(*) AS n, min(observed_at) AS first_at
        FROM gone
        GROUP BY cluster_id
    ) AS g
    WHERE c.cluster_id = g.cluster_id
    RETURNING c.cluster_id
), per_summary AS (
    INSERT INTO clusters.pruned_summaries AS s
        (cluster_id, summary, failure_count, last_failure_id, last_observed_at)
    SELECT DISTINCT ON (cluster_id, summary)
        cluster_id, summary, count(*) OVER (PARTITION BY cluster_id, summary), failure_id,
        observed_at
    FROM gone
    ORDER BY cluster_id, summary, observed_at DESC, failure_id
    ON CONFLICT (cluster_id, summary) DO UPDATE
    SET failure_count = s.failure_count + excluded.failure_count,
        last_failure_id = CASE
            WHEN (excluded.last_observed_at, s.last_failure_id)
                 > (s.last_observed_at, excluded.last_failure_id)
            THEN excluded.last_failure_id ELSE s.last_failure_id END,
        last_observed_at = greatest(s.last_observed_at, excluded.last_observed_at)
    RETURNING s.cluster_id
)
SELECT (SELECT count(*) FROM gone)::bigint AS pruned,
       (SELECT count(*) FROM per_cluster)::int AS clusters
