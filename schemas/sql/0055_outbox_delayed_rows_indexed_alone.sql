-- The outbox's delayed rows get an index of their own; a row written without a delay goes into
-- two indexes instead of four, and waits for no clock.
--
-- A row is delayed when it was written with an available_at later than its write
-- (available_at > created_at): the executor's retries, a writer's explicit later time. Only
-- such a row waits for the database's clock to reach its available_at, and only such a row holds
-- back the later rows of its key. A row written without a delay (available_at defaults to the
-- transaction's start, created_at to the statement's) is publishable from its write on, whatever
-- the clock does afterwards. Before, every row waited for `available_at <= now()`: a clock
-- stepped back after a write (an NTP correction) held that row, and every later row of its key,
-- until the clock caught up again, and the relay's gauges counted none of them as waiting.
--
-- Every row went into four indexes: the primary key, the queue of unpublished rows in id order
-- (outbox_unpublished, the relay's fetch), and two more over all unpublished rows —
-- outbox_unpublished_available (available_at), for the relay's read of the delayed rows, and
-- outbox_unpublished_by_key (record_key, id), for maintenance's question "is an earlier row of
-- this key delayed?". Both questions are about delayed rows only, which are few (usually none):
-- outbox_delayed holds just them, so a row written without a delay inserts into it nothing
-- (its predicate is evaluated, false). A writer's 25-row statement of ~700-byte envelopes: 18.7
-- -> 15.5 us of PostgreSQL CPU per row (medians of 8 alternated rounds).
--
-- The relay's fetch and gauges (spectral/outbox/relay/queries.sql) and maintenance's
-- core.outbox_held_back below state the same rule. Their conditions name the index's predicate
-- (published_at IS NULL AND available_at > created_at) and compare available_at with the clock,
-- the index's first column: the planner, which cannot estimate how few rows satisfy the
-- predicate (two columns compared: a third of the table, by default), estimates from
-- available_at's statistics how few of them are in the future, and reads the delayed rows
-- through this index, statistics or not. (Keyed by (record_key, id), the same index was costed
-- as a third of the slot, and an analysed slot was read whole through the queue instead.)

DROP INDEX core.outbox_unpublished_by_key;
DROP INDEX core.outbox_unpublished_available;
CREATE INDEX outbox_delayed ON core.outbox (available_at, record_key)
    WHERE published_at IS NULL AND available_at > created_at;

-- The unpublished rows of one slot that no relay can publish within the margin: delayed beyond
-- it, or queued behind an earlier row of their key that is (a relay publishes a key's rows in id
-- order). Maintenance counts them and moves them out of an ended slot. A row written without a
-- delay is never held back: a relay publishes it whatever the clock says. The rows delayed beyond
-- the margin (every slot's) are read once, through outbox_delayed, into the first id of each
-- of their keys, and the slot's unpublished rows are matched with that set by key: a row from
-- its key's first such id on is held back. (0011 asked, row by row, whether an earlier row of
-- the key was delayed, through outbox_unpublished_by_key; through outbox_delayed, whose first
-- column is available_at, that question read every delayed row for every row of the slot.)
CREATE OR REPLACE FUNCTION core.outbox_held_back(of_slot smallint, margin interval)
RETURNS TABLE (id bigint)
LANGUAGE sql STABLE AS $fn$
    WITH delayed AS MATERIALIZED (
        SELECT d.record_key, min(d.id) AS first_id
        FROM core.outbox AS d
        WHERE d.published_at IS NULL
          AND d.available_at > d.created_at
          AND d.available_at > now() + margin
        GROUP BY d.record_key
    )
    SELECT o.id
    FROM core.outbox AS o
    JOIN delayed ON delayed.record_key = o.record_key
    WHERE o.slot = of_slot
      AND o.published_at IS NULL
      AND o.id >= delayed.first_id
$fn$;
