-- The executor's queue gauges count the live items and the dead-lettered ones through indexes.
--
-- Each executor's sweep counts the work items by status, every status but the finished ones
-- (consumers/work_executor/reads.sql, queue_depth). Asked as `status NOT IN ('applied',
-- 'canceled')`, which no index serves, it read every item the work record ever finished, and the
-- record keeps them: a million applied items, ~0.07 s a sweep per executor, growing for ever.
-- The live items are counted through the index that holds them alone
-- (work_items_one_live_per_thread), and the dead-lettered ones through the index below, which
-- holds them alone: a sweep reads what it counts. An item is dead-lettered once; the index costs
-- that write one entry.

CREATE INDEX work_items_dead_lettered ON work.work_items (finished_at)
    WHERE status = 'dead_letter';
