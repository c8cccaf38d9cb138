"""The consumer engine's instruments, in one place, with label sets fixed at construction.

Labels: ``consumer`` (one per deployment), ``outcome`` (the four Outcome values), ``reason`` (the
decode reasons plus the engine's own, folded to ``other`` if unknown), ``component``
(database | kafka), ``fallback`` (reference | table), ``outcome`` of an early claim (kept |
applied_anew). Lag per partition is measured by
spectral/observability/progress.py (the engine reports its partitions and commits to an
``EngineHook``).
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram

from contracts.dead_letters import DEAD_LETTER_REASONS
from spectral.engine.handler import Outcome
from spectral.kafka.freshness import LATENCY_BUCKETS
from spectral.observability.metrics import BatchHistogram, per_member

FALLBACKS = ("reference", "table")
"""Where a dead letter went when the broker refused it whole: a reference on the dead-letter
topic, or (refused too) the database table core.dead_letters."""
EARLY_CLAIM_OUTCOMES = ("kept", "applied_anew")
"""What became of a batch claimed beside the commit before it (``EngineOptions.early_claim``)."""
_BATCH_BUCKETS = (1, 10, 50, 100, 250, 500, 1000, 2500, 5000, 10000)
_DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class ConsumerMetrics:
    def __init__(self, registry: CollectorRegistry, consumer: str) -> None:
        self.consumer = consumer
        self.consumed = Counter(
            "spectral_consumer_records_consumed_total",
            "Records fetched from Kafka by a consumer deployment.",
            ["consumer"],
            registry=registry,
        ).labels(consumer)
        outcomes = Counter(
            "spectral_consumer_events_total",
            "Consumed records by outcome: applied, stale, deduplicated, dead_lettered.",
            ["consumer", "outcome"],
            registry=registry,
        )
        self.outcomes = per_member(outcomes, Outcome, consumer)
        self._dead_letters = Counter(
            "spectral_consumer_dead_letters_total",
            "Records sent to the dead-letter topic, by reason.",
            ["consumer", "reason"],
            registry=registry,
        )
        self.batch_size = Histogram(
            "spectral_consumer_batch_size",
            "Records per processed batch.",
            ["consumer"],
            buckets=_BATCH_BUCKETS,
            registry=registry,
        ).labels(consumer)
        self.batch_duration = Histogram(
            "spectral_consumer_batch_duration_seconds",
            "Time from a batch's fetch to its offset commit.",
            ["consumer"],
            buckets=_DURATION_BUCKETS,
            registry=registry,
        ).labels(consumer)
        self._retries = Counter(
            "spectral_consumer_infrastructure_retries_total",
            "Retries after an infrastructure fault (never dead-lettered).",
            ["consumer", "component"],
            registry=registry,
        )
        fallbacks = Counter(
            "spectral_consumer_dead_letter_fallbacks_total",
            "Dead letters the broker refused whole: produced as a reference (no value), or — "
            "refused as that too — recorded in the database table core.dead_letters.",
            ["consumer", "fallback"],
            registry=registry,
        )
        self.fallbacks = {name: fallbacks.labels(consumer, name) for name in FALLBACKS}
        early_claims = Counter(
            "spectral_consumer_early_claims_total",
            "Batches of a backlog whose dedup claim ran beside the commit of the batch before "
            "them: kept (finished as claimed), or applied_anew (rolled back and applied the "
            "usual way: the batch before left one of the keys it was counted on unheld, a "
            "revocation took records of it meanwhile, or its transaction failed).",
            ["consumer", "outcome"],
            registry=registry,
        )
        self.early_claims = {
            name: early_claims.labels(consumer, name) for name in EARLY_CLAIM_OUTCOMES
        }
        self.freshness = BatchHistogram(
            "spectral_consumer_freshness_seconds",
            "End-to-end freshness of each record of a committed batch: from the time its outbox "
            "row became publishable (the outbox.ready_at header, the producer database's clock) "
            "to the commit of the transaction that applied it (this host's clock). Records "
            "without the header (not from spectral's outbox relay) are not observed.",
            {"consumer": consumer},
            LATENCY_BUCKETS,
            registry,
        )

    def dead_lettered(self, reason: str) -> None:
        label = reason if reason in DEAD_LETTER_REASONS else "other"
        self._dead_letters.labels(self.consumer, label).inc()
        self.outcomes[Outcome.DEAD_LETTERED].inc()

    def batch_done(self, records: int, seconds: float, counts: Mapping[Outcome, int]) -> None:
        """A batch was applied and its offsets committed (dead letters are counted as they
        are produced)."""
        for outcome in (Outcome.APPLIED, Outcome.STALE, Outcome.DEDUPLICATED):
            self.outcomes[outcome].inc(counts[outcome])
        self.batch_size.observe(records)
        self.batch_duration.observe(seconds)

    def retried(self, component: str) -> None:
        self._retries.labels(self.consumer, component).inc()
