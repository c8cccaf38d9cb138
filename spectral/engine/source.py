"""Where a run's records come from: the transport seam (spectral.kafka.transport) and the choice
of its implementation.

The engine reads through a :class:`~spectral.kafka.transport.RecordSource` that owns its client
and produces its dead letters through a :class:`~spectral.kafka.produce.Sender` that owns its
own, both built by a :class:`~spectral.kafka.transport.Transport`: :func:`configured_transport`
is the one the settings name; a test passes spectral.testing's in-memory broker instead.
"""

from __future__ import annotations

from spectral.kafka.configured import configured_transport
from spectral.kafka.transport import (
    FetchOptions,
    FixedRange,
    Reading,
    Rebalance,
    RecordSource,
    Subscription,
    Transport,
    UnreadableRecordsError,
)

__all__ = [
    "FetchOptions",
    "FixedRange",
    "Reading",
    "Rebalance",
    "RecordSource",
    "Subscription",
    "Transport",
    "UnreadableRecordsError",
    "configured_transport",
]
