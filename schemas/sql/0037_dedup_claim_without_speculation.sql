-- The dedup claim inserts its new keys with a plain INSERT, through a function whose statement is
-- planned with index probes only.
--
-- The claim (spectral/engine/queries.sql claim_keys) used to probe the previous slot for each key
-- and insert the others into the current slot with ON CONFLICT DO NOTHING on that slot's unique
-- key. A speculative insertion costs every row a check of the arbiter index before the insert, a
-- speculative-insertion lock and a second WAL record confirming the row. core.dedup_claim probes
-- both slots for each key instead (one index probe per slot, LATERAL ... LIMIT 1) and inserts
-- the keys neither holds with a plain INSERT: the insert's own uniqueness check still settles a
-- race. A concurrent transaction inserting the same key makes this one wait for it; if it
-- commits, this claim fails with a unique violation (class 23), which the engine retries as a
-- fault of the moment (spectral/engine/transaction.py): the retry's probe finds the key, so it is
-- a duplicate, exactly as before; if it rolls back, the insert goes on.
--
-- The probes must stay index probes whatever the planner knows of the table: the current slot
-- grows from empty after every rotation, and a plan made while it was small (a sequential scan
-- per key) would cost milliseconds per key once it is large. The function's statement is planned
-- anew at every call, with sequential and bitmap scans disabled for it (and only for it: the SET
-- clauses end with the call), so no plan the session caches can scan the table, and statements
-- of the handlers keep the session's settings.
--
-- What is recorded is unchanged: the same row per new key, in the current slot; the barrier
-- with a rotation is unchanged (the statement locks core.event_handled before its snapshot is
-- taken, and reads the current slot with that snapshot). Row-level security applies (the function
-- runs with the caller's privileges).

CREATE FUNCTION core.dedup_claim(
    of_consumer text, keys bytea[], events uuid[], partitions integer[], offsets bigint[]
)
RETURNS SETOF bytea
LANGUAGE sql VOLATILE
AS $fn$
    INSERT INTO core.event_handled
        (consumer, dedup_key, event_id, outcome, source_partition, source_offset, slot)
    SELECT of_consumer, t.k, t.e, 'applied', t.p, t.o, (SELECT core.dedup_current_slot())
    FROM unnest(keys, events, partitions, offsets) AS t (k, e, p, o)
    LEFT JOIN LATERAL (
        SELECT true AS held
        FROM core.event_handled AS earlier
        WHERE earlier.consumer = of_consumer AND earlier.dedup_key = t.k
        LIMIT 1
    ) AS found ON true
    WHERE found.held IS NULL
    RETURNING dedup_key
$fn$;

GRANT EXECUTE ON FUNCTION core.dedup_claim(text, bytea[], uuid[], integer[], bigint[])
    TO spectral_projector, spectral_executor, spectral_consumer;
