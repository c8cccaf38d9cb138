"""Every PostgreSQL advisory lock spectral takes, in one registry: one key space per database.

An advisory lock is named by two ``int`` keys, ``pg_advisory_*(class, object)``: the class says
whose lock it is, the object which one of theirs. Two parts of the code taking the same class
would block each other for no reason, or worse, exclude each other's work; so every class is
listed here, spectral's built-in features' too, and a test holds every literal of the SQL (the
migrations included) and every lock statement of the code to this list. A plugin that takes
advisory locks picks classes outside it.

Migrations take the one 64-bit key :data:`MIGRATION_KEY` (``pg_advisory_xact_lock(bigint)``):
PostgreSQL keeps the 64-bit and the two-``int`` key spaces apart.
"""

from __future__ import annotations

from enum import IntEnum, unique
from typing import Final


@unique
class LockClass(IntEnum):
    """The first key (``classid``) of each kind of two-key advisory lock."""

    OUTBOX_RELAY = 0x53504F58
    """"SPOX": the relay's shards (objects 0..15), its membership (1 << 16) and the doorbell
    slots (1 << 17 + 0..15) of migration ``0017_outbox_wakeup`` (spectral/outbox/relay)."""
    MAINTENANCE = 0x53504D54
    """"SPMT": one maintenance pass at a time (spectral/maintenance)."""
    WORK_PROJECT = 0x574B0001
    """"WK" 1: a project's documents, taken before any target lock (producers/work/domain)."""
    WORK_TARGET = 0x574B0002
    """"WK" 2: one work target (an epic), in sorted order (producers/work/domain)."""
    WORK_SCHEDULER = 0x574B0003
    """"WK" 3: the executors' claims, one at a time (consumers/work_executor)."""


MIGRATION_KEY: Final = 0x5350454354524C
""""SPECTRL": the 64-bit key every migrator takes (spectral/db/migrate.py)."""

__all__ = ["MIGRATION_KEY", "LockClass"]
