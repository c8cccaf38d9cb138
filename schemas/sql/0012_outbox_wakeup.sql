-- Outbox wake-up: a relay that found nothing to publish sleeps on LISTEN spectral_outbox instead
-- of polling every 200 ms, and a writer wakes it with NOTIFY, but only while a relay sleeps.
--
-- Why not a NOTIFY on every insert: PostgreSQL serialises the commits of every transaction that
-- notified (one lock for the whole server, held through the commit's WAL flush), so writers with
-- small transactions lose their group commit. Measured on PostgreSQL 15 with single-row
-- transactions: 2.4x fewer commits per second with 8 concurrent writers, 6x with 32
-- (benchmarks/BASELINE.md, "Freshness").
--
-- THE DOORBELL: sixteen advisory lock slots, class 0x53504F58 (the relay's lock class, see
-- producers/relay/shards.py), objid 131072 + 0..15. A relay about to sleep takes one free slot
-- EXCLUSIVELY (a session lock, tried: it never waits) and holds it while it sleeps. A writer, at
-- the end of each INSERT statement into core.outbox, tries the slots in SHARED mode, each for the
-- rest of its transaction; a slot it cannot get is held by a sleeping relay, so it notifies (the
-- notification is delivered when it commits) and stops trying. Sixteen slots: as many relays as
-- there are shards can sleep at once; a relay that finds no free slot keeps polling.
--
-- No lost wake-up. Every relay listens for its whole session. A relay sleeps long only after it
-- took a slot (time A), then read the outbox (time F > A) and found nothing. Take a writer W that
-- committed after F:
--   * if W notified, the notification reaches the relay when W commits;
--   * if it did not, W held every slot shared from its try until its commit. Had it tried the
--     relay's slot after A, the try would have failed and W would have notified; so it tried
--     before A, and the relay could take that slot at A only once W had committed: before F,
--     and the read at F saw W's rows.
-- A missed notification (a relay that reconnects, a bug) therefore costs at most the relay's
-- poll interval, which stays as the fallback. Both sides only try locks, so nobody ever waits for
-- the doorbell: writers never queue behind a relay, and the lock order of the work executor's
-- transactions is untouched. Reads and isolation levels do not matter (locks are not MVCC).
--
-- Writer cost: the statement-level trigger's sixteen tried locks (~5-15 us of the server's CPU
-- per INSERT statement, whatever the number of rows), and the notification's commit lock only
-- for the writers that find a relay asleep (in practice the first after a relay went idle: a
-- woken relay gives its slot back before it reads).
CREATE FUNCTION core.outbox_ring_doorbell() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    FOR doorbell_slot IN 0 .. 15 LOOP
        IF NOT pg_catalog.pg_try_advisory_xact_lock_shared(1397772120, 131072 + doorbell_slot) THEN
            PERFORM pg_catalog.pg_notify('spectral_outbox', '');
            RETURN NULL;
        END IF;
    END LOOP;
    RETURN NULL;
END
$fn$;

CREATE TRIGGER outbox_ring_doorbell AFTER INSERT ON core.outbox
    FOR EACH STATEMENT EXECUTE FUNCTION core.outbox_ring_doorbell();

-- The time a row was written (the INSERT statement's clock, no longer its transaction's start):
-- the relay forwards it in the record header `outbox.written_at`, from which consumers measure
-- end-to-end freshness (outbox write to projection commit).
ALTER TABLE core.outbox ALTER COLUMN created_at SET DEFAULT clock_timestamp();
