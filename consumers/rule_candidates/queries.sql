-- The rule-candidates projection (role spectral_projector) and the operator triage tools
-- (role spectral_operator). Each projection statement runs once per batch over arrays.

-- ======================================================================================
-- Projection (repository.py)
-- ======================================================================================

-- name: upsert_snapshots
-- One row per cluster (the batch is collapsed to each cluster's newest snapshot first: a row may
-- be written once per statement). New cluster -> INSERT (status defaults to 'pending'). Known
-- cluster -> the snapshot columns and last_signaled_at are overwritten only when the incoming
-- snapshot is newer in the order of collapse.py (ordered_at, the observation time capped for a
-- producer's clock, leads it); operator columns are never named. A dismissed or resolved
-- cluster receiving a newer, different snapshot gets resurfaced_at = now() and keeps its status.
-- Clusters not returned were stale.
-- $1 holds one row per snapshot (platform.rule_candidate_snapshot_us, migrations
-- rule_candidate_snapshot_rows, projection_times_as_microseconds: one array of rows costs the
-- consumer's driver one check per snapshot where eleven parallel arrays cost eleven); unnest
-- expands them into their columns. Its three times, and the two prior times answered, are
-- bigint microseconds since the Unix epoch (the driver encodes and decodes an integer in a
-- fraction of a timestamp's time), converted exactly in the function.
-- evidence is each snapshot's evidence bundle as JSON text (a JSON array: the bundle the
-- contract check read, FailureClusterView.evidence, or repository.py evidence_bytes of a record),
-- or the whole record value (a JSON object) whose payload.evidence_bundle is taken: the same
-- jsonb as the wire's bundle, fields a newer producer added to the bundle kept. Parsing only the
-- bundle costs the database about half of parsing the record. ordered_us may be NULL when it is
-- the snapshot's last_observed_us (migration projection_ordered_at_may_be_null).
-- The statement is the body of platform.upsert_rule_candidate_snapshots_us (migrations
-- projection_upsert_planned_once, projection_update_then_insert): one plan per session, made
-- with sequential and bitmap scans disabled, so each cluster of a batch is found by the primary
-- key whatever the projection's size (a generic plan made on the first batches' few clusters
-- scanned the whole projection). An UPDATE writes the clusters the projection holds, each found
-- by one probe; the same row version, read again by its address, gives its stored snapshot as it
-- was before the statement (prior_*: only for a row whose prior_wanted is true, the clusters
-- with superseded snapshots in the batch; NULL for the others), so the handler can tell which of
-- a written cluster's superseded snapshots were themselves older than the stored one (stale). The clusters it did
-- not update (new ones, and those whose stored snapshot is at least as new) go through
-- INSERT ... ON CONFLICT DO UPDATE with the same newer-wins condition, which also settles a
-- cluster a concurrent writer (two members during a rebalance) inserted meanwhile; against such a
-- writer the prior snapshot may be older than the version compared with: only that outcome label
-- can then be off. When the UPDATE took every snapshot of the batch (known clusters, each newer:
-- the usual batch of a live stream), that INSERT arm does not read the batch again (migration
-- projection_insert_only_when_needed: a condition evaluated once guards it).
-- inserted: xmax is 0 on a freshly inserted row version, the locker's xid on an updated one.
-- resurfaced: now() is this transaction's start time; only this statement can have written it.
-- The same statement records the signal hour of every applied cluster for the churn gauge,
-- except a cluster whose stored last_signaled_at already lies in this hour: last_signaled_at is
-- written only by this statement (or restored by a rebuild together with the signal rows it
-- had), always beside its hour's signal row, and the current hour is never pruned — so that row
-- exists, and probing for it again for every batch (~1 us of database CPU per event) is skipped.
SELECT * FROM platform.upsert_rule_candidate_snapshots_us($1::platform.rule_candidate_snapshot_us[]);

-- name: churn_windows
-- Distinct cluster_ids signalled per 24-hour window, windows $1..$2 (0 = the current hour
-- bucket and the 23 before it; d = the 24 buckets ending 24*d hours earlier). A window is
-- covered when the record reaches back to its first hour. Each window is one range scan of the
-- primary key (hour leads it).
WITH clock AS (
    SELECT date_trunc('hour', now()) AS hour,
           (SELECT min(hour) FROM platform.cluster_signal_hours) AS earliest
),
windows AS (
    SELECT d,
           clock.hour - make_interval(hours => 24 * d + 23) AS first_hour,
           clock.hour - make_interval(hours => 24 * d) AS last_hour
    FROM clock, generate_series($1::int, $2::int) AS d
)
SELECT w.d AS window_index,
       coalesce(w.first_hour >= clock.earliest, false) AS covered,
       (SELECT count(DISTINCT s.cluster_id)
        FROM platform.cluster_signal_hours AS s
        WHERE s.hour BETWEEN w.first_hour AND w.last_hour) AS clusters,
       clock.hour AS current_hour
FROM windows AS w, clock
ORDER BY w.d;

-- name: prune_signal_hours
DELETE FROM platform.cluster_signal_hours
WHERE hour < date_trunc('hour', now()) - make_interval(hours => $1::int);

-- ======================================================================================
-- Operator triage (triage.py)
-- ======================================================================================

-- name: list_candidates
-- resurfaced = it came back after the operator's last status change. $1 statuses (any of;
-- NULL = every status), $2 severity,
-- $3 workspace, $4 assignee (NULL = any); $5 only resurfaced; $6 include soft-deleted rows;
-- $7 limit; $8 sort; $9..$11 the keyset to continue after (NULL = from the start); $12 only
-- unassigned clusters.
-- Every sort is one ascending keyset (k1, k2, cluster_id): descending keys are negated (k2 is
-- the epoch as numeric, exact to the microsecond), so one row comparison pages any sort.
--   severity  most severe first, then the most recently observed (the default)
--   newest    most recently observed first;  oldest  least recently observed first
--   failures  most failures first, then the most recently observed
--   signaled  most recently signalled first
WITH keyed AS (
    SELECT c.*,
           (c.resurfaced_at IS NOT NULL
            AND (c.status_changed_at IS NULL OR c.resurfaced_at > c.status_changed_at))
               AS resurfaced,
           CASE $8::text
               WHEN 'severity' THEN CASE c.severity WHEN 'high' THEN 0 WHEN 'medium' THEN 1
                                                    ELSE 2 END
               WHEN 'failures' THEN -c.failure_count::bigint
               ELSE 0
           END AS k1,
           CASE $8::text
               WHEN 'oldest' THEN extract(epoch FROM c.last_observed_at)
               WHEN 'signaled' THEN -extract(epoch FROM c.last_signaled_at)
               ELSE -extract(epoch FROM c.last_observed_at)
           END AS k2
    FROM platform.rule_candidates_pending AS c
)
SELECT cluster_id, status, severity, workspace_id, rule_id, failure_count,
       first_observed_at, last_observed_at, last_signaled_at, created_at,
       assigned_to, resurfaced_at, status_changed_at, deleted_at, resurfaced, triage_version,
       left(evidence_bundle -> 0 ->> 'summary', 300) AS summary,
       k1, k2::text AS k2_text
FROM keyed
WHERE ($1::text[] IS NULL OR status = ANY ($1::text[]))
  AND ($2::text IS NULL OR severity = $2::text)
  AND ($3::uuid IS NULL OR workspace_id = $3::uuid)
  AND ($4::uuid IS NULL OR assigned_to = $4::uuid)
  AND (NOT $12::boolean OR assigned_to IS NULL)
  AND (NOT $5::boolean OR resurfaced)
  AND ($6::boolean OR deleted_at IS NULL)
  AND ($9::bigint IS NULL OR (k1, k2, cluster_id) > ($9::bigint, $10::numeric, $11::uuid))
ORDER BY k1, k2, cluster_id
LIMIT $7::int;

-- name: get_candidate
SELECT cluster_id, status, severity, workspace_id, rule_id, failure_count,
       first_observed_at, last_observed_at, last_signaled_at, created_at,
       assigned_to, resurfaced_at, status_changed_at, deleted_at,
       (resurfaced_at IS NOT NULL
        AND (status_changed_at IS NULL OR resurfaced_at > status_changed_at)) AS resurfaced,
       triage_version, left(evidence_bundle -> 0 ->> 'summary', 300) AS summary,
       snapshot_hash, notes, suggested_rule_stub,
       evidence_bundle::text AS evidence_bundle
FROM platform.rule_candidates_pending
WHERE cluster_id = $1::uuid;

-- name: inbox_counts
-- The inbox at a glance: live (not soft-deleted) clusters per status and severity.
SELECT status, severity, count(*) AS clusters
FROM platform.rule_candidates_pending
WHERE deleted_at IS NULL
GROUP BY status, severity;

-- name: failure_history
-- Each cluster's failure_count per signalled hour (0023), oldest first; $1 the clusters.
SELECT cluster_id, hour, failure_count
FROM platform.cluster_signal_hours
WHERE cluster_id = ANY ($1::uuid[]) AND failure_count IS NOT NULL
ORDER BY cluster_id, hour;

-- name: triage_audit
-- The audit trail of one cluster, oldest first (written by the database's trigger, 0008).
SELECT audit_id, triage_version, changed_at, actor, db_login, from_status, to_status,
       from_assignee, to_assignee, from_notes, to_notes, from_deleted_at, to_deleted_at
FROM platform.triage_audit
WHERE cluster_id = $1::uuid
ORDER BY triage_version;

-- name: act_as
-- The acting principal of this transaction, recorded by the audit trigger (core.current_actor).
SELECT set_config('spectral.actor', $1::text, true);

-- name: lock_candidate
-- Held until the triage update commits, so the transition and the expected version are checked
-- against the row that is actually replaced (two operators cannot both move it from one state).
SELECT status, triage_version
FROM platform.rule_candidates_pending WHERE cluster_id = $1::uuid FOR UPDATE;

-- name: update_triage
-- Only the operator columns. $2 status (NULL = keep); $3 change the assignee to $4;
-- $5 change the notes to $6; $7 'delete' | 'restore' | 'keep' for deleted_at.
UPDATE platform.rule_candidates_pending SET
    status      = coalesce($2::text, status),
    assigned_to = CASE WHEN $3::boolean THEN $4::uuid ELSE assigned_to END,
    notes       = CASE WHEN $5::boolean THEN $6::text ELSE notes END,
    deleted_at  = CASE $7::text
                      WHEN 'delete' THEN coalesce(deleted_at, now())
                      WHEN 'restore' THEN NULL
                      ELSE deleted_at
                  END
WHERE cluster_id = $1::uuid;
