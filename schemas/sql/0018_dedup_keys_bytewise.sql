-- The dedup record's keys compare byte by byte (COLLATE "C").
--
-- Every claim descends the primary key of core.event_handled twice per key (the previous slot's
-- probe, then the insert's uniqueness check), and ordering text under a libc collation calls
-- strcoll for every comparison on the way down, even under C.UTF-8; under "C" PostgreSQL compares
-- with memcmp. Equality is unchanged (every deterministic collation compares equal exactly when
-- the bytes are equal), so no two keys that were distinct become one, nor the reverse: only the
-- order inside the index changes, and the index is rebuilt here. Measured on this project's
-- machine with 300,000 keys in the table: 13.7 -> 11.9 us of PostgreSQL CPU per new key, 6.0 ->
-- 5.3 per duplicate (benchmarks/BASELINE.md).
--
-- The row-level security policy reads the column, so it is dropped and created again, the same
-- (0011 bounded_state, with the role 0015 plugins added), in this one transaction: no statement
-- ever runs against the table without it.

DROP POLICY event_handled_own_consumers ON core.event_handled;

ALTER TABLE core.event_handled
    ALTER COLUMN consumer TYPE text COLLATE "C",
    ALTER COLUMN idempotency_key TYPE text COLLATE "C";

CREATE POLICY event_handled_own_consumers ON core.event_handled
    TO spectral_projector, spectral_executor, spectral_consumer
    USING (consumer = ANY ((SELECT core.consumers_of_current_role())::text[]))
    WITH CHECK (consumer = ANY ((SELECT core.consumers_of_current_role())::text[]));
