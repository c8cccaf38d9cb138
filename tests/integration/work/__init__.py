"""Durable LLM work (issue 6) against a real PostgreSQL (and Kafka where marked)."""
