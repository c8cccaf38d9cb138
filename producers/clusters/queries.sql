-- Queries of producers/clusters/repository.py (FailureClusterService's state in schema clusters).

-- name: mint_clusters
-- Step 1 of ingest: mint a cluster_id for every grouping key seen for the first time (ADR-057
-- D1). The UNIQUE grouping key settles races: a concurrent replica's row wins and ours is
-- skipped. Keys are inserted in one fixed order, so two ingests never wait on each other in a
-- cycle. Failures already recorded (a re-ingested line) mint nothing.
INSERT INTO clusters.clusters (workspace_id, rule_id, signature)
SELECT DISTINCT t.workspace_id, t.rule_id, t.signature
FROM unnest($1::text[], $2::uuid[], $3::uuid[], $4::text[])
    AS t (failure_id, workspace_id, rule_id, signature)
WHERE NOT EXISTS (SELECT 1 FROM clusters.failures AS f WHERE f.failure_id = t.failure_id)
ORDER BY t.workspace_id, t.rule_id, t.signature
ON CONFLICT ON CONSTRAINT clusters_grouping_key DO NOTHING
RETURNING cluster_id

-- name: lock_clusters_for_keys
-- Step 2 of ingest: resolve every key to its cluster_id and lock those rows (in cluster_id
-- order) so no tick evaluates them while their failures are being added.
SELECT c.cluster_id, c.workspace_id, c.rule_id, c.signature
FROM clusters.clusters AS c
JOIN (
    SELECT DISTINCT k.workspace_id, k.rule_id, k.signature
    FROM unnest($1::uuid[], $2::uuid[], $3::text[]) AS k (workspace_id, rule_id, signature)
) AS k ON (k.workspace_id, k.rule_id, k.signature) = (c.workspace_id, c.rule_id, c.signature)
ORDER BY c.cluster_id
FOR NO KEY UPDATE OF c

-- name: insert_failures
-- Step 3 of ingest: record the new failures (a known failure_id changes nothing) and bump the
-- revision of every cluster that gained one, which makes it dirty for the next tick.
WITH inserted AS (
    INSERT INTO clusters.failures (failure_id, cluster_id, observed_at, summary, attributes)
    SELECT t.failure_id, t.cluster_id, t.observed_at, t.summary, t.attributes
    FROM unnest($1::text[], $2::uuid[], $3::timestamptz[], $4::text[], $5::jsonb[])
        AS t (failure_id, cluster_id, observed_at, summary, attributes)
    ON CONFLICT (failure_id) DO NOTHING
    RETURNING cluster_id
), bumped AS (
    UPDATE clusters.clusters AS c
    SET revision = c.revision + 1
    WHERE c.cluster_id IN (SELECT cluster_id FROM inserted)
    RETURNING c.cluster_id
)
SELECT (SELECT count(*) FROM inserted)::int AS inserted, (SELECT count(*) FROM bumped)::int AS touched

-- name: claim_dirty
-- A tick's batch: dirty clusters after the cursor, locked; rows another replica is evaluating
-- (or an ingest is filling) are skipped, never waited for.
SELECT cluster_id
FROM clusters.clusters
WHERE revision > evaluated_revision
  AND ($1::uuid IS NULL OR cluster_id > $1::uuid)
ORDER BY cluster_id
LIMIT $2
FOR UPDATE SKIP LOCKED

-- name: lock_cluster
SELECT cluster_id FROM clusters.clusters WHERE cluster_id = $1 FOR UPDATE

-- name: cluster_facts
-- What each cluster is now: identity, revision, last published hash, criticality, and the
-- aggregates the snapshot and the severity policy need, the failures retention pruned included:
-- the count of every failure ever recorded (clusters.summary_counts, kept as they are recorded,
-- migration 0065), the earliest observation (the live one from failures_by_cluster, the pruned
-- ones' rolled up on the cluster's row), the latest (never pruned), and the failures of the
-- rate window before the latest (never pruned). So a tick reads a hot cluster's summaries and
-- its rate window, not every failure the retention keeps.
SELECT c.cluster_id, c.workspace_id, c.rule_id, c.signature, c.revision, c.published_hash,
       coalesce(rc.criticality, $2::text) AS criticality,
       CASE WHEN a.last_observed_at IS NULL THEN 0
            ELSE (SELECT coalesce(sum(s.failure_count), 0)
                  FROM clusters.summary_counts AS s
                  WHERE s.cluster_id = c.cluster_id)
       END::bigint AS failure_count,
       least(a.first_observed_at, c.pruned_first_observed_at) AS first_observed_at,
       a.last_observed_at,
       (SELECT count(*)
        FROM clusters.failures AS w
        WHERE w.cluster_id = c.cluster_id
          AND w.observed_at >= a.last_observed_at - $3::interval)::bigint AS recent_count
FROM clusters.clusters AS c
CROSS JOIN LATERAL (
    SELECT (SELECT f.observed_at
            FROM clusters.failures AS f
            WHERE f.cluster_id = c.cluster_id
            ORDER BY f.observed_at
            LIMIT 1) AS first_observed_at,
           (SELECT f.observed_at
            FROM clusters.failures AS f
            WHERE f.cluster_id = c.cluster_id
            ORDER BY f.observed_at DESC
            LIMIT 1) AS last_observed_at
) AS a
LEFT JOIN clusters.rule_criticality AS rc ON rc.rule_id = c.rule_id
WHERE c.cluster_id = ANY($1::uuid[])
ORDER BY c.cluster_id

-- name: evidence_candidates
-- Per cluster, the only failures the evidence rule (evidence.py) can pick: the most recent
-- failure of each of the $2 most frequent summaries, and the $2 most recent failures; each
-- with the number of failures sharing its summary. Text order is code point order (COLLATE "C").
-- The counts and each summary's most recent failure are kept as failures are recorded
-- (clusters.summary_counts, migration 0065: pruned failures still count in their summary's
-- number, and its most recent failure may be a pruned one, which the counts keep); the $2 most
-- recent failures are never pruned, and are read from failures_by_cluster in
-- its order. So a tick reads a cluster's summaries and $2 failures, not its whole window.
WITH counts AS (
    SELECT s.cluster_id, s.summary, s.failure_count AS summary_count, s.last_failure_id,
           s.last_observed_at
    FROM clusters.summary_counts AS s
    WHERE s.cluster_id = ANY($1::uuid[])
), top_summaries AS (
    SELECT cluster_id, last_failure_id AS failure_id, last_observed_at AS observed_at, summary,
           summary_count
    FROM (
        SELECT n.*, row_number() OVER (
            PARTITION BY n.cluster_id ORDER BY n.summary_count DESC, n.summary) AS rank
        FROM counts AS n
    ) AS ranked
    WHERE rank <= $2
), most_recent AS (
    SELECT l.cluster_id, f.failure_id, f.observed_at, f.summary, n.summary_count
    FROM (SELECT DISTINCT cluster_id FROM unnest($1::uuid[]) AS u (cluster_id)) AS l
    CROSS JOIN LATERAL (
        SELECT f.failure_id, f.observed_at, f.summary
        FROM clusters.failures AS f
        WHERE f.cluster_id = l.cluster_id
        ORDER BY f.observed_at DESC, f.failure_id
        LIMIT $2
    ) AS f
    JOIN counts AS n ON (n.cluster_id, n.summary) = (l.cluster_id, f.summary)
)
SELECT cluster_id, failure_id, observed_at, summary, summary_count::bigint AS summary_count
FROM top_summaries
UNION
SELECT cluster_id, failure_id, observed_at, summary, summary_count::bigint
FROM most_recent

-- name: mark_evaluated
-- After a batch: remember the revision evaluated and, for clusters whose snapshot went to the
-- outbox, the hash published (NULL = nothing published this time).
UPDATE clusters.clusters AS c
SET evaluated_revision = greatest(c.evaluated_revision, v.revision),
    published_hash = coalesce(v.published_hash, c.published_hash),
    published_at = CASE WHEN v.published_hash IS NULL THEN c.published_at ELSE now() END
FROM unnest($1::uuid[], $2::bigint[], $3::text[]) AS v (cluster_id, revision, published_hash)
WHERE c.cluster_id = v.cluster_id

-- name: set_criticality
INSERT INTO clusters.rule_criticality (rule_id, criticality)
VALUES ($1, $2)
ON CONFLICT (rule_id) DO UPDATE SET criticality = excluded.criticality, updated_at = now()

-- name: list_clusters
SELECT cluster_id, workspace_id, rule_id, signature, detected_at, revision, evaluated_revision,
       published_hash, published_at
FROM clusters.clusters
ORDER BY workspace_id, rule_id, signature

-- name: stub_work
-- The stub work of each (cluster $1, content hash $2), by its identity ($3) and document ($4):
-- the stub once set, else its newest thread — closed or not, and whether the snapshot still
-- waits for it: its first call is still to come or in flight, asked less than $5 seconds ago.
SELECT k.cluster_id, k.content_hash, d.content ->> 'rule_stub' AS rule_stub, t.thread_id,
       t.closed_at IS NOT NULL AS closed,
       coalesce(t.closed_at IS NULL AND i.status IN ('queued', 'claimed', 'running')
                AND i.attempt <= 1 AND t.created_at > now() - make_interval(secs => $5),
                false) AS hold
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[])
    AS k (cluster_id, content_hash, identity, document_id)
LEFT JOIN work.documents d ON d.document_id = k.document_id
LEFT JOIN LATERAL (
    SELECT t.thread_id, t.closed_at, t.created_at
    FROM work.threads t
    WHERE t.idempotency_key = k.identity
    ORDER BY t.created_at DESC
    LIMIT 1
) t ON true
LEFT JOIN LATERAL (
    SELECT w.status, w.attempt
    FROM work.work_items w
    WHERE w.thread_id = t.thread_id
    ORDER BY w.sequence DESC
    LIMIT 1
) i ON true

-- name: superseded_stub_work
-- The live stub work of these clusters ($1, as text) other than for their current content
-- (identities $2): the index threads_live_rule_stubs.
SELECT t.thread_id
FROM work.threads t
WHERE t.kind = 'rule_stub' AND t.status IN ('open', 'running')
  AND t.target_ref ->> 'cluster_id' = ANY($1::text[])
  AND NOT (t.idempotency_key = ANY($2::text[]))
ORDER BY t.thread_id

-- name: await_stubs
UPDATE clusters.clusters c
SET stub_awaited = a.thread_id
FROM unnest($1::uuid[], $2::uuid[]) AS a (cluster_id, thread_id)
WHERE c.cluster_id = a.cluster_id

-- name: stub_arrivals
-- Clusters whose snapshot went out without a stub still being worked on, that work now ended:
-- dirty again (their next evaluation publishes the stub, if one came).
UPDATE clusters.clusters c
SET revision = c.revision + 1, stub_awaited = NULL
FROM work.threads t
WHERE t.thread_id = c.stub_awaited AND t.closed_at IS NOT NULL
RETURNING c.cluster_id
