-- 0029 unknown outcomes resolved by a policy (consumers/work_executor/outcomes.py): a call whose
-- worker died mid-call is re-issued under the same idempotency key, or its reservation, left
-- 'unknown', is released after a horizon — exactly once either way.
--
-- work.spend.reissues           how often the attempt's call was sent again under its key
-- work.spend.released_unknown_at  when a reservation left 'unknown' was released at the horizon
--                               (state 'released' then; NULL for every other release)

ALTER TABLE work.spend
    ADD COLUMN reissues integer NOT NULL DEFAULT 0 CHECK (reissues >= 0),
    ADD COLUMN released_unknown_at timestamptz NULL,
    ADD CONSTRAINT spend_released_unknown_is_released
        CHECK (released_unknown_at IS NULL OR state = 'released');

GRANT UPDATE (reissues, released_unknown_at) ON work.spend TO spectral_executor;
