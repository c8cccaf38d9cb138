"""Bounded state: ``spectral maintenance`` prunes the dedup record and the outbox.

``core.event_handled`` (the dedup record) and ``core.outbox`` are rings of partitions
(migration ``bounded_state``) emptied whole with TRUNCATE: the dedup record behind a horizon
derived from the topics' retention (no key is forgotten while a record carrying it can still be
read), the outbox after a retention counted from publication (an unpublished row is never
pruned). policy.py decides, repository.py does the database work, run.py is one pass, guard.py
is the replay check.
"""
