"""The transactional outbox: the writer (rows in the producer's own transaction) and the relay
(core.outbox -> Kafka, at least once, in per-key order)."""
