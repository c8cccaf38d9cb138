-- 0006 work-executor dedup grants: the consumer engine marks a delivery the executor did not
-- claim as 'stale' (UPDATE of outcome) and forgets rejected ones (DELETE), in core.event_handled,
-- as the executor's role — the same grant 0002 gives the projector.
GRANT UPDATE (outcome), DELETE ON core.event_handled TO spectral_executor;
