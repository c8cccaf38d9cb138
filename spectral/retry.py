"""Pure retry policy: capped exponential backoff (no I/O, no clock — callers sleep).

``backoff(n)`` is the wait before the n-th retry: ``min(base * 2**(n-1), cap)``. ADR-0008 uses
base 1 s and cap = 10 x base for work items; the consumer engine uses it for infrastructure
faults with a larger cap, so a database outage is retried patiently, never dead-lettered.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    base: float = 0.5
    cap: float = 30.0

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1-based)."""
        if retry < 1:
            raise ValueError("retry numbers start at 1")
        # Beyond 2**30 the cap has long been reached; avoid huge floats.
        return float(min(self.base * 2 ** min(retry - 1, 30), self.cap))
