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
threshold is raised so the batches in flight do not trigger collections: a decoded record is
~30 tracked objects, a batch of 2,000 ~60,000, and the engine holds up to three batches (one
applying, two decoded ahead). At 50,000 every batch triggered two or three young collections
over objects that were all still alive (~1-2 us of CPU per record, measured in the consumer
process with a ``gc.callbacks`` probe); at 200,000 they run about once per three batches' worth
of net growth. Memory stays bounded: collections still run, every 200,000 net allocations
(young) and every 20 x 100 of those (full); peak RSS was unchanged (116-122 MiB on the
benchmark's first pass).
"""

from __future__ import annotations

import gc
from typing import Final

THRESHOLDS: Final = (200_000, 20, 100)


def tune_for_batches() -> None:
    """Freeze what start-up allocated and raise the collection thresholds (idempotent)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
