-- A project's threads are indexed in the order their pages list them.
--
-- The project's threads are listed newest first, a page continuing after the last row of the
-- one before (producers/work/domain/queries.sql, project_threads: ORDER BY created_at DESC,
-- thread_id; keyset (created_at, thread_id)). threads_by_space (space_type, space_id,
-- created_at DESC) held the first part of that order only: a later page read every thread of
-- the project from the cursor on (or every newer one) and sorted them for its page — cursor
-- paging that cost what OFFSET paging does (200,000 threads, the page after the 100,000th:
-- 0.04-0.12 s). The index now ends with thread_id, the order's tie-break: a page is read from
-- the cursor in order and stops at its last row. It replaces threads_by_space, whose reads it
-- serves as well. A thread is written once when it opens: one index entry, as before.

CREATE INDEX threads_by_space_in_page_order
    ON work.threads (space_type, space_id, created_at DESC, thread_id);
DROP INDEX work.threads_by_space;
