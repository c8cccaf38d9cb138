-- 0010 rule-stub attempts: ADR-0008's hardening for the suggested_rule_stub worker.
--
-- attempts (already counted: 1 at the claim, +1 at each recovery) is now capped. A failed
-- attempt is recorded on its lease at once: the lease stays 'pending' with retry_at = now() +
-- min(base * 2^(n-1), base * 10) (capped backoff), and the recovery clause re-claims it then;
-- a permanent failure, or a failure of the last attempt, stamps the permanent marker
-- generation_mode = 'failed' (last_error says why: e.g. 'max_attempts_exceeded'), and nobody
-- calls the model for that content again. A lease whose holder died mid-call (stale, retry_at
-- NULL) has used its attempt: the recovery clause marks it 'failed' when it was the last.
--
-- response keeps the paid answer of the last attempt losslessly (spectral.llm.answers: text
-- PostgreSQL cannot store is kept as its exact code points, base64, encoding marked), whether
-- it made a stub or not: nothing paid for is dropped.

ALTER TABLE clusters.rule_stub_leases
    DROP CONSTRAINT rule_stub_leases_generation_mode_check,
    ADD CONSTRAINT rule_stub_leases_generation_mode_check
        CHECK (generation_mode IN ('pending', 'llm', 'superseded', 'failed')),
    ADD COLUMN retry_at timestamptz NULL,
    ADD COLUMN last_error text NULL CHECK (length(last_error) <= 2000),
    ADD COLUMN response jsonb NULL,
    ADD CONSTRAINT rule_stub_leases_retry_only_pending
        CHECK (retry_at IS NULL OR generation_mode = 'pending');

-- The recovery clause's second question: pending leases whose retry is due.
CREATE INDEX rule_stub_leases_retry_due ON clusters.rule_stub_leases (retry_at)
    WHERE generation_mode = 'pending' AND retry_at IS NOT NULL;
