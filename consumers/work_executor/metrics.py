"""The executor's instruments, in one class over an injected registry (ADR-0008 §4).

Names and label sets are fixed: ``synthesis_attempts_total{outcome}`` (4 series),
``synthesis_duration_seconds`` (histogram, 1 ms .. 65.5 s in powers of two),
``synthesis_failures_total{reason}`` (8 series), plus ``work_queue_depth{status}`` (4 series,
refreshed by the periodic sweep), ``work_dead_letters_total{reason}`` (4 series) and
``work_dead_letter_items`` (items currently dead-lettered),
``work_response_journal_records_total{event}`` (paid answers appended to the local journal,
replayed from a dead process's journal, refused by the database and kept in the rejected file,
or not appended because the journal's disk failed: 4 series) and
``work_database_waits_total`` (retries of a statement while the database was unavailable).
Every series exists from the start (initialised at 0), so dashboards and alerts never see
"no data" for a quiet label.

Reasons follow ADR-0008's list where it applies here: ``set_org_id`` has no counterpart (no
row-level security in this schema), ``write_merge`` is ``write_mutation``, and
``outcome_unknown`` counts calls whose worker died or lost its lease before a response was
recorded.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from consumers.work_executor.retry import DeadLetterReason

DURATION_BUCKETS: Final = tuple(0.001 * 2**i for i in range(17))  # 1 ms .. 65.536 s


class AttemptOutcome(StrEnum):
    SUCCESS = "success"
    TRANSIENT_FAILURE = "transient_failure"
    PERMANENT_FAILURE = "permanent_failure"
    SKIPPED = "skipped"


class FailureReason(StrEnum):
    LOAD_ROW = "load_row"
    ROUTER_RESOLVE = "router_resolve"
    SYNTHESIZER = "synthesizer"
    INVALID_JSON = "invalid_json"
    WRITE_MUTATION = "write_mutation"
    OUTCOME_UNKNOWN = "outcome_unknown"
    MAX_ATTEMPTS_EXCEEDED = "max_attempts_exceeded"
    UNKNOWN = "unknown"


class JournalEvent(StrEnum):
    APPENDED = "appended"
    REPLAYED = "replayed"
    REJECTED = "rejected"
    APPEND_FAILED = "append_failed"


class QueueStatus(StrEnum):
    QUEUED = "queued"
    CLAIMED = "claimed"
    RUNNING = "running"
    RETRY_WAIT = "failed"  # a transient failure waiting for its not_before


class ExecutorMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.attempts = Counter(
            "synthesis_attempts",
            "Work items taken up by the executor, by outcome.",
            ["outcome"],
            registry=registry,
        )
        self.duration = Histogram(
            "synthesis_duration_seconds",
            "Duration of one paid synthesizer call.",
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.failures = Counter(
            "synthesis_failures",
            "Failures of work items, by reason.",
            ["reason"],
            registry=registry,
        )
        self.queue_depth = Gauge(
            "work_queue_depth",
            "Work items not yet terminal, by status (refreshed by the periodic sweep).",
            ["status"],
            registry=registry,
        )
        self.dead_letters = Counter(
            "work_dead_letters",
            "Work items this executor dead-lettered, by reason.",
            ["reason"],
            registry=registry,
        )
        self.dead_letter_items = Gauge(
            "work_dead_letter_items",
            "Work items currently in dead_letter (refreshed by the periodic sweep).",
            registry=registry,
        )
        self.oldest_lease_age = Gauge(
            "work_oldest_lease_age_seconds",
            "Age of the oldest live work-item lease (refreshed by the periodic sweep); past the "
            "lease timeout it is stale.",
            registry=registry,
        )
        self.journal_records = Counter(
            "work_response_journal_records",
            "Paid answers through the local response journal, by event.",
            ["event"],
            registry=registry,
        )
        self.database_waits = Counter(
            "work_database_waits",
            "Statements the executor retried while the database was unavailable.",
            registry=registry,
        )
        for event in JournalEvent:
            self.journal_records.labels(event.value)
        for outcome in AttemptOutcome:
            self.attempts.labels(outcome.value)
        for reason in FailureReason:
            self.failures.labels(reason.value)
        for status in QueueStatus:
            self.queue_depth.labels(status.value)
        for dead in DeadLetterReason:
            self.dead_letters.labels(dead.value)

    def attempt(self, outcome: AttemptOutcome) -> None:
        self.attempts.labels(outcome.value).inc()

    def failure(self, reason: FailureReason) -> None:
        self.failures.labels(reason.value).inc()

    def dead_lettered(self, reason: DeadLetterReason) -> None:
        self.dead_letters.labels(reason.value).inc()

    def observe_queue(self, depth: dict[QueueStatus, int], dead_letter_items: int) -> None:
        for status in QueueStatus:
            self.queue_depth.labels(status.value).set(depth.get(status, 0))
        self.dead_letter_items.set(dead_letter_items)

    def journal(self, event: JournalEvent, records: int = 1) -> None:
        self.journal_records.labels(event.value).inc(records)

    def database_wait(self) -> None:
        self.database_waits.inc()
