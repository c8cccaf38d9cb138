-- 0023 failures over time, per cluster, for the console's charts: the hour buckets in which a
-- cluster was signalled (0002) also keep the cluster's failure_count as the first snapshot of
-- that hour reported it. The projection writes it in the statement that already writes the
-- bucket (one row per cluster per signalled hour, as before: no more writes on the hot path), and
-- prunes it with the buckets (8 days). Buckets written before this migration have none.
ALTER TABLE platform.cluster_signal_hours
    ADD COLUMN failure_count bigint NULL CHECK (failure_count >= 1);
COMMENT ON COLUMN platform.cluster_signal_hours.failure_count IS
    'The cluster''s failure_count in the first snapshot applied in this hour (NULL before 0023).';
