"""Garbage-collector settings of a consumer process (called by ``spectral consume``).

A batch keeps a few thousand decoded envelopes alive at once (each a handful of pydantic
objects). With CPython's default thresholds (700, 10, 10) that many live allocations trigger a
young collection every 700 objects and a full collection — a walk over every object in the
process: modules, pydantic schemas, aiokafka buffers — every ~70,000; measured on the
rule-candidates stream that walk was a third of the CPU spent decoding. The envelopes hold no
reference cycles (reference counting frees them with their batch), so the cyclic collector
finds nothing there; it only needs to run now and then for the few cycles asyncio and the
clients leave behind.

So: objects alive after start-up (imports, handler, clients) are frozen out of the collector's
view (``gc.freeze``: they live as long as the process anyway), and the young generation
threshold is raised so a batch does not trigger collections. Memory stays bounded: collections
still run, every 50,000 net allocations (young) and every 20 x 100 of those (full).
"""

from __future__ import annotations

import gc
from typing import Final

THRESHOLDS: Final = (50_000, 20, 100)


def tune_for_batches() -> None:
    """Freeze what start-up allocated and raise the collection thresholds (idempotent)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
