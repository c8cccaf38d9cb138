-- One transaction held across every batch of a dry run or a rebuild (held_transaction.py).

-- name: row_changes
-- Row operations of the current transaction so far, per table (including its subtransactions,
-- committed or not: the caller takes differences around each kept batch). Temporary tables are
-- the caller's scratch space, not changes.
SELECT schemaname || '.' || relname AS table_name,
       n_tup_ins AS inserted,
       n_tup_upd AS updated,
       n_tup_del AS deleted
FROM pg_stat_xact_user_tables
WHERE schemaname NOT LIKE 'pg\_temp%'
  AND n_tup_ins + n_tup_upd + n_tup_del > 0;
