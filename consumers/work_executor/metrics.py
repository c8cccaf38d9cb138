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

Spend and scheduling (bounded too — ``SpendLabels``): ``work_tokens_total`` and
``work_cost_total`` ``{model, function, org}`` (settled usage; ``model`` is one of the
configured model routes, else ``other``/``none``; ``function`` a known function key, else
``other``; ``org`` one of ``SPECTRAL_WORK_METRIC_ORGS``, else one of 16 hash buckets
``bucket-00``..``bucket-15``, ``none`` without an org), ``work_provider_waits_total{model,
reason}`` (claims that left work waiting because a route had no capacity: concurrency,
requests_per_minute, tokens_per_minute, paused, suspended, probation),
``work_rate_limited_total{model}`` (429s), ``work_usage_overruns_total``,
``work_usage_overrun_tokens_total`` and ``work_usage_overrun_cost_total`` ``{model}`` (provider
overruns: overruns.py),
``work_canceled_items_total`` and ``work_parked_items`` (refreshed by the sweep), and
``work_budget_parked_items_total{scope}`` (items a claim parked, by the *kind* of the budget
scope that parked them: org, project, thread, route — never one series per scope).

Reasons follow ADR-0008's list where it applies here: ``set_org_id`` has no counterpart (no
row-level security in this schema), ``write_merge`` is ``write_mutation``, and
``outcome_unknown`` counts calls whose worker died or lost its lease before a response was
recorded.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from enum import StrEnum
from typing import Final

import xxhash
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from consumers.work_executor.retry import DeadLetterReason
from consumers.work_executor.schedule import Blocked
from producers.work.domain.budgets import ScopeKind
from producers.work.domain.model import STORY_FUNCTION_KEY
from spectral.observability.metrics import per_member

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
    PARKED = "parked"  # waiting for a budget (org, project, thread, route)


ORG_BUCKETS: Final = 16
KNOWN_FUNCTIONS: Final = frozenset({STORY_FUNCTION_KEY, "rule_stub"})


class SpendLabels:
    """Bounded label values: models from configuration, known function keys, configured orgs
    (others in 16 stable hash buckets)."""

    def __init__(self, models: Iterable[str] = (), orgs: Iterable[str] = ()) -> None:
        self.models = frozenset(models)
        self.orgs = frozenset(orgs)

    def model(self, model: str | None) -> str:
        if model is None:
            return "none"
        return model if model in self.models else "other"

    @staticmethod
    def function(function_key: str) -> str:
        return function_key if function_key in KNOWN_FUNCTIONS else "other"

    def org(self, org_id: str | None) -> str:
        if org_id is None:
            return "none"
        if org_id in self.orgs:
            return org_id
        return f"bucket-{xxhash.xxh32_intdigest(org_id.encode('utf-8')) % ORG_BUCKETS:02d}"


class ExecutorMetrics:
    def __init__(self, registry: CollectorRegistry, labels: SpendLabels | None = None) -> None:
        self.labels = labels or SpendLabels()
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
        self.tokens = Counter(
            "work_tokens",
            "Tokens of paid calls, settled from the usage their responses reported.",
            ["model", "function", "org"],
            registry=registry,
        )
        self.cost = Counter(
            "work_cost",
            "Cost of paid calls (the unit of the configured prices), settled from their usage.",
            ["model", "function", "org"],
            registry=registry,
        )
        self.provider_waits = Counter(
            "work_provider_waits",
            "Claims that left work waiting because a model route had no capacity, by reason.",
            ["model", "reason"],
            registry=registry,
        )
        self.rate_limited = Counter(
            "work_rate_limited",
            "Calls a gateway refused for capacity (429): retried after its Retry-After, not "
            "counted as attempts.",
            ["model"],
            registry=registry,
        )
        self.overruns = Counter(
            "work_usage_overruns",
            "Paid calls a provider billed above their reservation (a provider overrun: usage "
            "beyond the completion bound it was sent, or tokens it counts that were not "
            "reserved).",
            ["model"],
            registry=registry,
        )
        self.overrun_tokens = Counter(
            "work_usage_overrun_tokens",
            "Tokens providers billed beyond the reservations of their calls.",
            ["model"],
            registry=registry,
        )
        self.overrun_cost = Counter(
            "work_usage_overrun_cost",
            "Cost providers billed beyond the reservations of their calls.",
            ["model"],
            registry=registry,
        )
        self.unknown_outcome_calls = Gauge(
            "work_unknown_outcome_reservations",
            "Reservations of paid calls whose outcome is unknown (the worker died or the call "
            "timed out after the request left): counted in full, never re-paid silently "
            "(refreshed by the periodic sweep).",
            registry=registry,
        )
        self.unknown_outcome_tokens = Gauge(
            "work_unknown_outcome_reserved_tokens",
            "Tokens held by the reservations of calls whose outcome is unknown (refreshed by the "
            "periodic sweep).",
            registry=registry,
        )
        self.streams_stopped = Counter(
            "work_streams_stopped",
            "Streamed answers whose reading stopped at the call's completion bound (max_tokens): "
            "the provider did not stop; the call settles at its reservation.",
            ["model"],
            registry=registry,
        )
        self.reissued = Counter(
            "work_unknown_outcome_reissues",
            "Calls whose outcome was unknown (their worker died mid-call, or the call timed out) "
            "sent again under the same idempotency key: a gateway that honours it answers "
            "without billing again.",
            registry=registry,
        )
        self.unknown_released = Counter(
            "work_unknown_outcome_released",
            "Reservations of calls whose outcome stayed unknown released at the horizon "
            "(SPECTRAL_WORK_UNKNOWN_OUTCOME_HORIZON_SECONDS).",
            registry=registry,
        )
        self.canceled = Counter(
            "work_canceled_items",
            "Work items this executor ended canceled (their cancellation was asked for while "
            "it held them).",
            registry=registry,
        )
        self.budget_parked = Counter(
            "work_budget_parked_items",
            "Work items parked because a budget had no room for their call, by the kind of the "
            "scope whose budget parked them (org, project, thread, route).",
            ["scope"],
            registry=registry,
        )
        for model in (*self.labels.models, "other", "none"):
            self.rate_limited.labels(model)
            self.overruns.labels(model)
            self.overrun_tokens.labels(model)
            self.overrun_cost.labels(model)
            self.streams_stopped.labels(model)
            for blocked in Blocked:
                self.provider_waits.labels(model, blocked.value)
        self._journal_records = per_member(self.journal_records, JournalEvent)
        self._attempts = per_member(self.attempts, AttemptOutcome)
        self._failures = per_member(self.failures, FailureReason)
        self._queue_depth = per_member(self.queue_depth, QueueStatus)
        self._dead_letters = per_member(self.dead_letters, DeadLetterReason)
        self._budget_parked = per_member(self.budget_parked, ScopeKind)

    def attempt(self, outcome: AttemptOutcome) -> None:
        self._attempts[outcome].inc()

    def failure(self, reason: FailureReason) -> None:
        self._failures[reason].inc()

    def dead_lettered(self, reason: DeadLetterReason) -> None:
        self._dead_letters[reason].inc()

    def observe_queue(self, depth: dict[QueueStatus, int], dead_letter_items: int) -> None:
        for status, series in self._queue_depth.items():
            series.set(depth.get(status, 0))
        self.dead_letter_items.set(dead_letter_items)

    def spent(
        self, model: str | None, function_key: str, org_id: str | None, tokens: int, cost: Decimal
    ) -> None:
        labels = (
            self.labels.model(model),
            self.labels.function(function_key),
            self.labels.org(org_id),
        )
        self.tokens.labels(*labels).inc(max(tokens, 0))
        self.cost.labels(*labels).inc(float(max(cost, Decimal(0))))

    def overran(self, model: str | None, tokens: int, cost: Decimal) -> None:
        label = self.labels.model(model)
        self.overruns.labels(label).inc()
        self.overrun_tokens.labels(label).inc(tokens)
        self.overrun_cost.labels(label).inc(float(cost))

    def stream_stopped(self, model: str | None) -> None:
        self.streams_stopped.labels(self.labels.model(model)).inc()

    def parked(self, by_scope: dict[ScopeKind, int]) -> None:
        for kind, items in by_scope.items():
            self._budget_parked[kind].inc(items)

    def provider_wait(self, model: str, reason: Blocked) -> None:
        self.provider_waits.labels(self.labels.model(model), reason.value).inc()

    def rate_limit(self, model: str | None) -> None:
        self.rate_limited.labels(self.labels.model(model)).inc()

    def journal(self, event: JournalEvent, records: int = 1) -> None:
        self._journal_records[event].inc(records)

    def database_wait(self) -> None:
        self.database_waits.inc()
