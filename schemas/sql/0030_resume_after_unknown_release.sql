-- 0030 room given back at the unknown-outcome horizon resumes the work it parked: a parked item
-- resumes (consumers/work_executor/claims.sql, resume_parked) when a reservation of its parking
-- scope was released at the horizon after the item was parked, as it does when that budget
-- changes or its period rolls over. The released reservations are found through this index
-- (few rows: only reservations whose outcome stayed unknown to the horizon have a time here).
CREATE INDEX spend_released_unknown ON work.spend (released_unknown_at)
    INCLUDE (org_id, project_id, thread_id, parent_thread_id, model)
    WHERE released_unknown_at IS NOT NULL;
