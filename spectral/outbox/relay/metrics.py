"""The relay's instruments, in one place; label values from a fixed set."""

from __future__ import annotations

from enum import StrEnum

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from spectral.faults import Component, Refusal
from spectral.kafka.freshness import LATENCY_BUCKETS
from spectral.observability.metrics import BatchHistogram, per_member

_DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class Wakeup(StrEnum):
    NOTIFY = "notify"
    """A writer rang the doorbell (LISTEN/NOTIFY)."""
    POLL = "poll"
    """The poll interval (or, while a writer was in flight, a shorter retry) ran out."""


class RelayMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.depth = Gauge(
            "spectral_outbox_depth",
            "Unpublished rows in core.outbox (delayed rows included).",
            registry=registry,
        )
        self.oldest_age = Gauge(
            "spectral_outbox_oldest_age_seconds",
            (
                "How long the oldest publishable, unpublished outbox row has waited (a row "
                "queued behind a delayed row of its key is not publishable yet; 0 when none)."
            ),
            registry=registry,
        )
        self.published = Counter(
            "spectral_outbox_relay_published_total",
            "Outbox rows acknowledged by Kafka (acks=all) and marked published.",
            registry=registry,
        )
        self.publish_delay = BatchHistogram(
            "spectral_outbox_relay_delay_seconds",
            "Per published row: from the time it became publishable (its write into core.outbox, "
            "or its available_at when delayed; the database's clock) to Kafka's acknowledgement "
            "(this host's clock).",
            {},
            LATENCY_BUCKETS,
            registry,
        )
        """Observed a batch at a time (one lock per batch, not two per row)."""
        wakeups = Counter(
            "spectral_outbox_relay_wakeups_total",
            "Times an idle relay woke up to read the outbox again, by cause.",
            ["cause"],
            registry=registry,
        )
        self.wakeups = per_member(wakeups, Wakeup)
        self.batch_duration = Histogram(
            "spectral_outbox_relay_batch_duration_seconds",
            "Time from fetching a batch to marking it published.",
            buckets=_DURATION_BUCKETS,
            registry=registry,
        )
        self.shards_held = Gauge(
            "spectral_outbox_relay_shards_held",
            "Key-hash shards this relay holds (their advisory locks).",
            registry=registry,
        )
        errors = Counter(
            "spectral_outbox_relay_errors_total",
            "Faults that made the relay back off and start a new session, by component.",
            ["component"],
            registry=registry,
        )
        self.errors = per_member(errors, Component)
        refused = Counter(
            "spectral_outbox_relay_refused_total",
            "Sends Kafka refused for good (the record too large for its topic, a topic the relay "
            "may not write, an invalid topic or record), by reason: the row stays unpublished "
            "and its key waits.",
            ["reason"],
            registry=registry,
        )
        self.refused = per_member(refused, Refusal)
        self.keys_held_back = Gauge(
            "spectral_outbox_relay_keys_held_back",
            "Record keys this relay leaves out of its batches until their next try, their first "
            "unpublished row refused by Kafka for good.",
            registry=registry,
        )
