-- The replay guard (guard.py), run as the consumer's role.

-- name: copies_before
-- Records appended at or after this time carry no forgotten dedup key (NULL: none forgotten).
SELECT max(copies_before) FROM core.dedup_generations
