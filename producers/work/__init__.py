"""Work commands (ADR-035 §7, §8, §12): open threads and enqueue work items, idempotently by
semantic identity, each command in one transaction with its outbox events; and the HTTP API."""
