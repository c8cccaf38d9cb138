"""Durable LLM work (ADR-035): the domain both the commands and the executor share — statuses,
semantic identities, locks, canonical documents and their mutations, ledger hashing and the
read side (thread views, history reconstructed from the ledger)."""
