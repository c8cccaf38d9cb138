-- A listing of one topic's dead letters of one reason reads the rows it lists.
--
-- `spectral dlq list TOPIC --reason R` (and the API's and the console's listings) select the
-- oldest rows of a topic and reason from core.dead_letters (spectral/dlq/store.sql,
-- dead_letter_summaries_of_topic). The table's only index beside its keys, dead_letters_topic
-- (source_topic, id), holds no reason, so a listing walked the topic's rows in id order and
-- threw away every row of another reason: the table fills exactly when a dead-letter topic
-- cannot take records, typically with a flood of one reason, and a listing of any other reason
-- read the whole flood every time (1,000,000 rows of one reason: 0.21 s per listing of 10 of
-- another; tests/integration/dlq/test_dead_letter_table_plans.py). A listing with no reason
-- keeps using dead_letters_topic. A dead letter is recorded once, rarely: the index costs that
-- write one entry.

CREATE INDEX dead_letters_topic_reason ON core.dead_letters (source_topic, reason, id);
