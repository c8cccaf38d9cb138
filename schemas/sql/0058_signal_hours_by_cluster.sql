-- The failure history of a page of clusters reads those clusters' hours only.
--
-- platform.cluster_signal_hours is keyed by (hour, cluster_id): the churn gauge reads it by hour.
-- The inbox's and a cluster page's failure history ask for a few clusters' hours
-- (rule-candidates queries.sql, failure_history: cluster_id = ANY(...)), which that key cannot
-- find without reading every cluster's hours: 5,000 clusters over 8 days, 960,000 rows read
-- for the 50 clusters of a page, 0.08 s a page, growing with the clusters signalled. An index by
-- cluster serves that read. The projection writes a row once per cluster and hour (its
-- ON CONFLICT DO NOTHING probes the primary key, as before), so the index costs one entry per
-- cluster-hour, not per event; failure_count is not in it, so nothing else changes.

CREATE INDEX cluster_signal_hours_by_cluster ON platform.cluster_signal_hours (cluster_id, hour);
