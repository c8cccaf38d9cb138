-- One transaction held across every batch of a dry run or a rebuild (held_transaction.py).

-- name: row_changes
-- Row operations of the current transaction so far, per table (including its subtransactions,
-- committed or not: the caller takes differences around each kept batch). Temporary tables are
-- the caller's scratch space, not changes. The partitions of a partitioned table
-- (core.event_handled, core.outbox) count under the table's own name.
SELECT n.nspname || '.' || c.relname AS table_name,
       sum(s.n_tup_ins)::bigint AS inserted,
       sum(s.n_tup_upd)::bigint AS updated,
       sum(s.n_tup_del)::bigint AS deleted
FROM pg_stat_xact_user_tables AS s
JOIN pg_class AS c ON c.oid = coalesce(pg_partition_root(s.relid), s.relid)
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE s.schemaname NOT LIKE 'pg\_temp%'
  AND s.n_tup_ins + s.n_tup_upd + s.n_tup_del > 0
GROUP BY 1;
