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
-- producers/relay/shards.py), objid 131072 + 0..15; a relay uses the slot of the lowest shard it
-- holds (shards are held by one relay each, so no two relays share a slot). A relay about to
-- sleep takes its slot EXCLUSIVELY (a session lock, through core.outbox_await_doorbell) and holds
-- it while it sleeps. A writer, at the end of each INSERT statement into core.outbox, tries the
-- slots in SHARED mode, each for the rest of its transaction; a slot it cannot get is held (or
-- awaited) by a relay, so it notifies (delivered when it commits) and stops trying.
--
-- No lost wake-up. Every relay listens for its whole session. A relay sleeps long only after it
-- took its slot (time A), then read the outbox (time F > A) and found nothing. Take a writer W that
-- committed after F:
--   * if W notified, the notification reaches the relay when W commits;
--   * if it did not, W held every slot shared from its try until its commit. Had it tried the
--     relay's slot after A, the try would have failed and W would have notified; so it tried
--     before A, and the relay could take that slot at A only once W had committed: before F,
--     and the read at F saw W's rows.
-- A relay that finds its slot held shared waits for it (up to its poll interval): the writers in
-- flight commit, and writers that arrive meanwhile cannot take the slot (a waiter is queued
-- ahead of them), so they notify; the relay reads as soon as the last writer before it committed.
-- A missed notification (a relay that reconnects, a bug) costs at most the relay's poll interval,
-- which stays as the fallback. Writers only ever try the locks, so no writer waits for the
-- doorbell, and the lock order of the work executor's transactions is untouched. Reads and
-- isolation levels do not matter (locks are not MVCC).
--
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

-- The relay's side: take doorbell slot `slot` (0..15) exclusively as a session lock, waiting at
-- most `wait_ms` for the writers in flight; false when they did not all commit in time.
CREATE FUNCTION core.outbox_await_doorbell(slot integer, wait_ms integer) RETURNS boolean
LANGUAGE plpgsql AS $fn$
BEGIN
    IF slot NOT BETWEEN 0 AND 15 THEN
        RAISE EXCEPTION 'doorbell slot % is not one of 0..15', slot;
    END IF;
    -- (0 would mean no timeout at all)
    PERFORM pg_catalog.set_config('lock_timeout', greatest(wait_ms, 1) || 'ms', true);
    PERFORM pg_catalog.pg_advisory_lock(1397772120, 131072 + slot);
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END
$fn$;
REVOKE ALL ON FUNCTION core.outbox_await_doorbell(integer, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.outbox_await_doorbell(integer, integer) TO spectral_relay;

-- The time a row was written (the INSERT statement's clock, no longer its transaction's start):
-- the relay forwards it in the record header `outbox.written_at`, from which consumers measure
-- end-to-end freshness (outbox write to projection commit).
ALTER TABLE core.outbox ALTER COLUMN created_at SET DEFAULT clock_timestamp();
