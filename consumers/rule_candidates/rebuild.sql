-- `spectral rebuild rule-candidates` (rebuild.py): statements run as spectral_projector inside
-- the rebuild's single transaction, before the first replayed batch and after the last. The
-- projector role cannot write status, assigned_to, notes or deleted_at, and cannot delete rows:
-- whatever these statements or the replayed upserts do, operator columns stay as they are.

-- name: save_before
-- The projection as it was, to restore what the topic cannot rebuild and to report the diff.
CREATE TEMP TABLE rebuild_before ON COMMIT DROP AS
SELECT cluster_id, snapshot_hash, rule_id, workspace_id, severity, failure_count,
       first_observed_at, last_observed_at, evidence_bundle, suggested_rule_stub, ordered_at,
       last_signaled_at, resurfaced_at
FROM platform.rule_candidates_pending;

-- name: save_signal_hour
-- The churn record of this hour (every upsert of this transaction records its clusters here).
CREATE TEMP TABLE rebuild_signal_hour ON COMMIT DROP AS
SELECT cluster_id FROM platform.cluster_signal_hours WHERE hour = date_trunc('hour', now());

-- name: reset_order
-- Any snapshot from the topic is newer than this: the stale guard lets the topic's snapshots
-- rewrite every row, oldest first, and keeps the newest.
UPDATE platform.rule_candidates_pending SET ordered_at = '-infinity', last_observed_at = '-infinity';

-- name: restore_unreached
-- Rows no record of the topic reached (their snapshots are past the topic's retention) keep
-- their stored snapshot.
UPDATE platform.rule_candidates_pending AS t SET
    snapshot_hash       = b.snapshot_hash,
    rule_id             = b.rule_id,
    workspace_id        = b.workspace_id,
    severity            = b.severity,
    failure_count       = b.failure_count,
    first_observed_at   = b.first_observed_at,
    last_observed_at    = b.last_observed_at,
    evidence_bundle     = b.evidence_bundle,
    suggested_rule_stub = b.suggested_rule_stub,
    ordered_at          = b.ordered_at
FROM rebuild_before AS b
WHERE t.cluster_id = b.cluster_id AND t.ordered_at = '-infinity'
RETURNING t.cluster_id;

-- name: restore_lifecycle
-- last_signaled_at (when signals arrived) and resurfaced_at (which depends on the operator's
-- status when they arrived) are history the topic does not hold: a rebuild is not a signal.
UPDATE platform.rule_candidates_pending AS t SET
    last_signaled_at = b.last_signaled_at,
    resurfaced_at    = b.resurfaced_at
FROM rebuild_before AS b
WHERE t.cluster_id = b.cluster_id
  AND (t.last_signaled_at, t.resurfaced_at) IS DISTINCT FROM (b.last_signaled_at, b.resurfaced_at);

-- name: forget_signal_burst
-- Nor does a rebuild feed the churn alarm. An anti-join, not `NOT IN (SELECT ...)`: PostgreSQL
-- hashes that subquery only while the hash fits in memory, and past that scans it again for
-- every row of the hour (test_rebuild_plan.py).
DELETE FROM platform.cluster_signal_hours AS h
WHERE h.hour = date_trunc('hour', now())
  AND NOT EXISTS (SELECT FROM rebuild_signal_hour AS s WHERE s.cluster_id = h.cluster_id);

-- name: diff
SELECT
    count(*) FILTER (WHERE b.cluster_id IS NULL) AS inserted,
    count(*) FILTER (
        WHERE b.cluster_id IS NOT NULL
          AND (t.snapshot_hash, t.rule_id, t.workspace_id, t.severity, t.failure_count,
               t.first_observed_at, t.last_observed_at, t.evidence_bundle, t.suggested_rule_stub)
              IS DISTINCT FROM
              (b.snapshot_hash, b.rule_id, b.workspace_id, b.severity, b.failure_count,
               b.first_observed_at, b.last_observed_at, b.evidence_bundle, b.suggested_rule_stub)
    ) AS changed,
    count(*) AS total
FROM platform.rule_candidates_pending AS t
LEFT JOIN rebuild_before AS b USING (cluster_id);
