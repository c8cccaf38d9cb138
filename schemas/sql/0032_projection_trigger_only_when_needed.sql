-- The projection's BEFORE INSERT trigger runs only for a row that needs it.
--
-- rule_candidates_ordered_at (0009 rule_candidates_contract_bounds) fills ordered_at for a row
-- inserted without one (by hand, by tools that predate the column). The projection always
-- supplies it, yet a BEFORE INSERT row trigger fires for every row an INSERT ... ON CONFLICT
-- proposes, the updates included: one PL/pgSQL call per cluster per batch that changed nothing.
-- With the condition in the trigger's WHEN clause the call is made only when ordered_at is
-- missing, so what the trigger does is unchanged.

DROP TRIGGER rule_candidates_ordered_at ON platform.rule_candidates_pending;
CREATE TRIGGER rule_candidates_ordered_at
    BEFORE INSERT ON platform.rule_candidates_pending
    FOR EACH ROW WHEN (NEW.ordered_at IS NULL)
    EXECUTE FUNCTION platform.rule_candidates_default_ordered_at();
