"""Kafka adapter: client configuration, topics, producing and consuming helpers."""
