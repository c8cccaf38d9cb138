"""The transactional outbox relay: core.outbox -> Kafka, at least once, in per-key order."""

from producers.relay.metrics import RelayMetrics
from producers.relay.relay import OutboxRelay, RelayOptions, RelayReport

__all__ = ["OutboxRelay", "RelayMetrics", "RelayOptions", "RelayReport"]
