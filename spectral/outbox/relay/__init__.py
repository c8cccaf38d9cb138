"""The transactional outbox relay: core.outbox -> Kafka, at least once, in per-key order."""

from spectral.outbox.relay.metrics import RelayMetrics
from spectral.outbox.relay.relay import OutboxRelay, RelayOptions, RelayReport

__all__ = ["OutboxRelay", "RelayMetrics", "RelayOptions", "RelayReport"]
