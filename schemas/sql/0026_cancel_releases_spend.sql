-- 0026 a cancellation releases, in its own transaction, the reservations of leased items whose
-- attempt has not started: once their cancellation is asked for no attempt of theirs can start
-- (work.held_items), so their holder — alive, frozen or dead until its lease times out — will
-- never call. Commands (API, CLI) may now mark such a reservation released.
GRANT UPDATE (state) ON work.spend TO spectral_producer;
