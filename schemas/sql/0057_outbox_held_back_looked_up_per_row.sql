-- Maintenance's held-back check looks each row's key up once, whatever the planner expects.
--
-- core.outbox_held_back (0055 outbox_delayed_rows_indexed_alone) read the rows delayed beyond
-- the margin once, into each key's first delayed id, and joined the slot's unpublished rows with
-- that list by key. On a slot without statistics (filled faster than autovacuum came by: the
-- backlog of an outage, the very moment maintenance checks an ended generation) the planner
-- expected a handful of rows on each side and joined them by a nested loop: every row of the
-- slot read the whole list. 40,000 rows waiting and 10,000 delayed: 500 million rows compared,
-- ~29 s of CPU a maintenance pass, twice (the count, then the move).
--
-- The list is now one JSON object (key -> first delayed id), built once per statement (an
-- uncorrelated subquery), in which each row of the slot finds its key by a binary search
-- (`->>`): one lookup per row, with statistics or without. A row from its key's first delayed id
-- on is held back; a key with no delayed row is absent (NULL: not held back), and so is every key
-- when no row is delayed. The rows it returns are 0055's, for the same arguments. The relay's
-- reads of the delayed rows (spectral/outbox/relay/queries.sql, delayed_keys) do the same.
--
-- No data changes; the function keeps its parameters, result and privileges.

CREATE OR REPLACE FUNCTION core.outbox_held_back(of_slot smallint, margin interval)
RETURNS TABLE (id bigint)
LANGUAGE sql STABLE AS $fn$
    SELECT o.id
    FROM core.outbox AS o
    WHERE o.slot = of_slot
      AND o.published_at IS NULL
      AND o.id >= ((
          SELECT jsonb_object_agg(k.record_key, k.first_id)
          FROM (
              SELECT d.record_key, min(d.id) AS first_id
              FROM core.outbox AS d
              WHERE d.published_at IS NULL
                AND d.available_at > d.created_at
                AND d.available_at > now() + margin
              GROUP BY d.record_key
          ) AS k
      ) ->> o.record_key)::bigint
$fn$;
