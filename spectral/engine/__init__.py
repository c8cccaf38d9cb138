"""The idempotent consumer engine: Kafka in, exactly-once effects in PostgreSQL out."""
